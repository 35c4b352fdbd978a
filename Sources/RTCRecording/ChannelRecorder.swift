import NIOConcurrencyHelpers
import RTCCore
import Signaling

/// Records what an engine receives into `directory`, in one of two layouts or both
/// (``Options/layout``), and a `manifest.json` listing every file. See `docs/recording.md`.
/// - `tracks` (the default): per remote user and track one IVF (the VP8 frames as received, no
///   re-encoding) or one WAV (the played-out 48 kHz stereo PCM).
/// - `webm`: per remote participant one WebM with its VP8 and Opus as received (no decoding),
///   audio and video placed on the sender's one clock from its RTCP sender reports (lip sync);
///   a user's screen share (`<uid>_sub`, or its own screen tracks) is a participant file of its own.
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
    /// What to write and for whom.
    public struct Options: Sendable, Hashable {
        /// Which files a recording folder gets.
        public enum Layout: String, Sendable, Hashable, CaseIterable {
            /// One IVF or WAV per remote track (`<uid>-<source>.ivf`/`.wav`).
            case tracks
            /// One WebM per remote participant (`<uid>.webm`, `<uid>-screen.webm`).
            case webm
            /// Both.
            case both
        }

        public var layout: Layout
        /// Only these uids are recorded; nil records everyone.
        public var uids: Set<String>?

        public init(layout: Layout = .tracks, uids: Set<String>? = nil) {
            self.layout = layout
            self.uids = uids
        }

        var tracks: Bool { layout != .webm }
        var webm: Bool { layout != .tracks }
    }

    /// A recorded file's container.
    public enum Format: String, Sendable, Hashable {
        case ivf, wav, webm
    }

    /// How a WebM's audio and video were placed on one timeline.
    public enum Synchronization: String, Sendable, Hashable {
        /// By the senders' RTCP sender reports (the sender's capture clock): lip sync as sent.
        case senderReports
        /// By arrival time, for streams that had no sender report in time.
        case arrival
    }

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
        /// Video frames, or 20 ms audio blocks written (a WAV), or video frames (a WebM).
        public var units: Int
        /// The name inside the recording folder (the manifest's `path`).
        public internal(set) var name: String = ""
        public internal(set) var kind: TrackKind = .video
        /// `vp8` or `pcm_s16le`.
        public internal(set) var codec: String = ""
        public internal(set) var trackSid: String = ""
        /// 1 for `<uid>-<source>.ext`, n for `<uid>-<source>.n.ext`.
        public internal(set) var segment: Int = 1
        /// Audio written, in milliseconds (0 for an IVF).
        public internal(set) var durationMs: Int = 0
        /// Wall-clock arrival of the first and last unit written, ms since 1970.
        public internal(set) var firstArrivalMs: Int64?
        public internal(set) var lastArrivalMs: Int64?
        public internal(set) var format: Format = .ivf
        /// A WebM with an Opus track (`kind` is `.video` for any WebM with a VP8 track).
        public internal(set) var hasAudio = false
        /// A WebM's timeline (nil for IVF and WAV).
        public internal(set) var synchronization: Synchronization?
        /// A WebM's sender reports left out because they contradicted the ones before (a sender
        /// whose RTP clock runs apart from its wall clock): its units were spaced by their RTP
        /// timestamps instead (``ParticipantTimeline``).
        public internal(set) var discountedSenderReports = 0
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

        /// Whether the file holds audio.
        public var holdsAudio: Bool { kind == .audio || hasAudio }
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
    public let options: Options
    private let thread: MediaThread
    private let state: RecorderState
    private let failures: NIOLockedValueBox<[String]>
    private let errorHandler: NIOLockedValueBox<(@Sendable (Failure) -> Void)?>
    /// Posts a failure on the attached engine's event stream (`.error`, code `.recording`).
    private let engineReport: NIOLockedValueBox<(@Sendable (Failure) -> Void)?>
    private let eventTask = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let result = NIOLockedValueBox<[File]?>(nil)

    public init(directory: String, options: Options = Options()) {
        self.directory = directory
        self.options = options
        let failures = NIOLockedValueBox<[String]>([]), errorHandler = NIOLockedValueBox<(@Sendable (Failure) -> Void)?>(nil)
        let engineReport = NIOLockedValueBox<(@Sendable (Failure) -> Void)?>(nil)
        self.failures = failures
        self.errorHandler = errorHandler
        self.engineReport = engineReport
        state = RecorderState(
            directory: directory, options: options,
            report: { failure in
                failures.withLockedValue { $0.append(failure.message) }
                errorHandler.withLockedValue { $0 }?(failure)
                engineReport.withLockedValue { $0 }?(failure)
            },
            note: { line in failures.withLockedValue { $0.append(line) } })
        thread = MediaThread(name: "recorder")
    }

    deinit {
        thread.stop()
    }

    /// Called on the recorder's thread for every file that cannot be started or ends on a write
    /// error (a full disk, an unwritable folder): one call per file. The attached engine's event
    /// stream gets the same failure as `.error` with code `.recording`. Recording goes on for the
    /// other files; the engine is not affected.
    public var onError: (@Sendable (Failure) -> Void)? {
        get { errorHandler.withLockedValue { $0 } }
        set { errorHandler.withLockedValue { $0 = newValue } }
    }

    /// Starts recording `engine`'s remote media (replaces its encoded-video sink, and its audio or
    /// encoded-audio sink as the layout needs) and follows its events: a user's files end when it
    /// leaves (`left`) or unpublishes the track.
    public func attach(to engine: RTCEngine) {
        let thread = self.thread, state = self.state, options = self.options
        engine.setRemoteEncodedVideoSink { frame in
            thread.execute {
                if options.tracks { state.record(frame) }
                if options.webm { state.recordWebM(frame) }
            }
        }
        if options.tracks { engine.setRemoteAudioSink { frame in thread.execute { state.record(frame) } } }
        if options.webm { engine.setRemoteEncodedAudioSink { frame in thread.execute { state.recordWebM(frame) } } }
        // Failures also reach the app where it sees the engine's own errors.
        engineReport.withLockedValue { $0 = { [weak engine] failure in engine?.report(RTCEngineError(.recording, failure.message)) } }
        let events = engine.events
        let task = Task {
            for await event in events {
                switch event {
                case .remoteTrackPublished, .remoteTrackUnpublished, .userOffline, .leftChannel, .decryptionFailed:
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
