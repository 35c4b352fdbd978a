import NIOConcurrencyHelpers
import Signaling

/// Records what an engine receives into `directory`: per remote user and track one IVF (the VP8
/// frames as received, no re-encoding) or one WAV (the played-out 48 kHz stereo PCM), and a
/// `manifest.json` listing every file. See `docs/recording.md`.
///
/// - Names: `<uid>-<source>.ivf`/`.wav`; a later track of the same user and source (a republish,
///   a rejoin) starts a numbered segment beside it (`<uid>-<source>.2.ivf`, `.3`, …). Files are
///   created with `O_EXCL`: a name already taken in the folder is skipped, nothing is overwritten.
/// - Crash safety: each IVF frame (header and payload) and each audio block is one unbuffered
///   `write`, and headers get their current sizes once a second, so a killed process leaves files
///   readable up to about its last second, never ending inside a frame.
/// - Files are written on the recorder's own thread: the engine's decode and playout threads only
///   queue frames to it.
public final class ChannelRecorder: Sendable {
    /// Why a file ended.
    public enum EndReason: String, Sendable, Hashable {
        /// The user left the channel (`userOffline`).
        case left
        /// The track was unpublished while the user stayed.
        case unpublished
        /// A new track of the same user and source started (its file is the next segment).
        case republished
        /// The recorder stopped (`stop()`, or the local engine left).
        case stopped
        /// The file system is full; the file holds every frame before the failed write.
        case diskFull
        /// Another write error; the file holds every frame before the failed write.
        case writeFailed
    }

    /// One recorded file, as listed in `manifest.json`.
    public struct File: Sendable, Hashable {
        /// Full path (`directory/name`).
        public var path: String
        public var uid: String
        public var source: String
        /// Video frames or 20 ms audio blocks written.
        public var units: Int
        /// The name inside the recording folder (the manifest's `path`).
        public internal(set) var name: String = ""
        public internal(set) var kind: TrackKind = .video
        /// `vp8` or `pcm_s16le`.
        public internal(set) var codec: String = ""
        public internal(set) var trackSid: String = ""
        /// 1 for `<uid>-<source>.ext`, n for `<uid>-<source>.n.ext`.
        public internal(set) var segment: Int = 1
        /// Audio written, in milliseconds (0 for video).
        public internal(set) var durationMs: Int = 0
        /// Wall-clock arrival of the first and last unit written, ms since 1970.
        public internal(set) var firstArrivalMs: Int64?
        public internal(set) var lastArrivalMs: Int64?
        /// Why the file ended; nil while it is still being written.
        public internal(set) var ended: EndReason?
        /// The error that ended it (`diskFull`, `writeFailed`).
        public internal(set) var error: String?

        public init(path: String, uid: String, source: String, units: Int) {
            self.path = path
            self.uid = uid
            self.source = source
            self.units = units
        }

        /// Video frames written (0 for audio).
        public var frames: Int { kind == .video ? units : 0 }
    }

    /// A file that could not be started or that ended on a write error.
    public struct Failure: Sendable, CustomStringConvertible {
        /// The file as it stands (its `ended`, `error`, and what was written before).
        public var file: File
        /// One line for a person: the file, what failed, and what is kept.
        public var message: String
        public var description: String { message }
    }

    public let directory: String
    private let thread: MediaThread
    private let state: RecorderState
    private let failures: NIOLockedValueBox<[String]>
    private let errorHandler: NIOLockedValueBox<(@Sendable (Failure) -> Void)?>
    private let eventTask = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let result = NIOLockedValueBox<[File]?>(nil)

    public init(directory: String) {
        self.directory = directory
        let failures = NIOLockedValueBox<[String]>([]), errorHandler = NIOLockedValueBox<(@Sendable (Failure) -> Void)?>(nil)
        self.failures = failures
        self.errorHandler = errorHandler
        state = RecorderState(
            directory: directory,
            report: { failure in
                failures.withLockedValue { $0.append(failure.message) }
                errorHandler.withLockedValue { $0 }?(failure)
            },
            note: { line in failures.withLockedValue { $0.append(line) } })
        thread = MediaThread(name: "recorder")
    }

    deinit {
        thread.stop()
    }

    /// Called on the recorder's thread for every file that cannot be started or ends on a write
    /// error (a full disk, an unwritable folder): one call per file. Recording goes on for the
    /// other files; the engine is not affected.
    public var onError: (@Sendable (Failure) -> Void)? {
        get { errorHandler.withLockedValue { $0 } }
        set { errorHandler.withLockedValue { $0 = newValue } }
    }

    /// Starts recording `engine`'s remote media (replaces its encoded-video and audio sinks) and
    /// follows its events: a user's files end when it leaves (`left`) or unpublishes the track.
    public func attach(to engine: RTCEngine) {
        let thread = self.thread, state = self.state
        engine.setRemoteEncodedVideoSink { frame in thread.execute { state.record(frame) } }
        engine.setRemoteAudioSink { frame in thread.execute { state.record(frame) } }
        let events = engine.events
        let task = Task {
            for await event in events {
                switch event {
                case .remoteTrackPublished, .remoteTrackUnpublished, .userOffline, .leftChannel:
                    thread.execute { state.handle(event) }
                default:
                    break
                }
            }
        }
        eventTask.withLockedValue { previous in
            previous?.cancel()
            previous = task
        }
    }

    /// Errors met while writing (a full disk, a bad path), one line each.
    public var errors: [String] { failures.withLockedValue { $0 } }

    /// Ends every open file (reason `stopped`; headers get their final sizes), writes the
    /// manifest, stops the recorder's thread and lists every file started, segments included.
    /// Idempotent; media that arrives later is ignored.
    @discardableResult
    public func stop() -> [File] {
        eventTask.withLockedValue { task in
            task?.cancel()
            task = nil
        }
        let state = self.state, result = self.result
        thread.execute {
            let files = state.stop()
            result.withLockedValue { $0 = files }
        }
        thread.stop()
        return (result.withLockedValue { $0 } ?? []).sorted {
            ($0.uid, $0.source, $0.kind.rawValue, $0.segment) < ($1.uid, $1.source, $1.kind.rawValue, $1.segment)
        }
    }

    /// The same as ``stop()`` (the older name).
    @discardableResult
    public func finish() -> [File] { stop() }
}
