import NIOConcurrencyHelpers

/// Records what an engine receives: one IVF (the VP8 frames as received, no re-encoding) and one
/// WAV (the played-out 48 kHz stereo PCM) per remote user and track, named `<uid>-<source>.ivf`
/// and `<uid>-<source>.wav` in `directory`.
public final class ChannelRecorder: Sendable {
    public struct File: Sendable, Hashable {
        public var path: String
        public var uid: String
        public var source: String
        /// Video frames or 20 ms audio blocks written.
        public var units: Int
    }

    private final class VideoFile: @unchecked Sendable {
        let writer: IVFWriter
        let path: String, uid: String, source: String
        var firstTimestamp: UInt32
        var frames = 0
        init(writer: IVFWriter, path: String, uid: String, source: String, firstTimestamp: UInt32) {
            self.writer = writer
            self.path = path
            self.uid = uid
            self.source = source
            self.firstTimestamp = firstTimestamp
        }
    }

    private final class AudioFile: @unchecked Sendable {
        let writer: WAVWriter
        let path: String, uid: String, source: String
        var blocks = 0
        init(writer: WAVWriter, path: String, uid: String, source: String) {
            self.writer = writer
            self.path = path
            self.uid = uid
            self.source = source
        }
    }

    public let directory: String
    private let video = NIOLockedValueBox<[String: VideoFile]>([:])
    private let audio = NIOLockedValueBox<[String: AudioFile]>([:])
    private let failures = NIOLockedValueBox<[String]>([])

    public init(directory: String) {
        self.directory = directory
    }

    /// Starts recording `engine`'s remote media (replaces its encoded-video and audio sinks).
    public func attach(to engine: RTCEngine) {
        engine.setRemoteEncodedVideoSink { [self] frame in record(frame) }
        engine.setRemoteAudioSink { [self] frame in record(frame) }
    }

    /// Errors met while writing (a full disk, a bad path), one line each.
    public var errors: [String] { failures.withLockedValue { $0 } }

    private func name(_ uid: String, _ source: String, _ ext: String) -> String {
        let safe = String(uid.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" ? $0 : "_" })
        return "\(directory)/\(safe)-\(source).\(ext)"
    }

    private func record(_ frame: RemoteEncodedVideoFrame) {
        video.withLockedValue { files in
            do {
                let key = frame.trackSid
                if files[key] == nil {
                    guard frame.isKeyframe, let width = frame.width, let height = frame.height else { return }
                    let path = name(frame.uid, frame.source.rawValue, "ivf")
                    let writer = try IVFWriter(path: path, header: IVFHeader(width: width, height: height, timebaseNumerator: 1,
                                                                            timebaseDenominator: 90000))
                    files[key] = VideoFile(writer: writer, path: path, uid: frame.uid, source: frame.source.rawValue,
                                           firstTimestamp: frame.rtpTimestamp)
                }
                guard let file = files[key] else { return }
                try file.writer.write(frame.data, timestamp: UInt64(frame.rtpTimestamp &- file.firstTimestamp))
                file.frames += 1
            } catch {
                failures.withLockedValue { $0.append("\(error)") }
            }
        }
    }

    private func record(_ frame: RemoteAudioFrame) {
        audio.withLockedValue { files in
            do {
                let key = frame.trackSid
                if files[key] == nil {
                    let path = name(frame.uid, frame.source.rawValue, "wav")
                    files[key] = AudioFile(writer: try WAVWriter(path: path, sampleRate: frame.frame.sampleRate, channels: frame.frame.channels),
                                           path: path, uid: frame.uid, source: frame.source.rawValue)
                }
                guard let file = files[key] else { return }
                try file.writer.write(frame.frame)
                file.blocks += 1
            } catch {
                failures.withLockedValue { $0.append("\(error)") }
            }
        }
    }

    /// Closes every file (headers get their final sizes) and lists them.
    @discardableResult
    public func finish() -> [File] {
        var result: [File] = []
        video.withLockedValue { files in
            for file in files.values {
                do { try file.writer.finish() } catch { failures.withLockedValue { $0.append("\(error)") } }
                result.append(File(path: file.path, uid: file.uid, source: file.source, units: file.frames))
            }
            files.removeAll()
        }
        audio.withLockedValue { files in
            for file in files.values {
                do { try file.writer.finish() } catch { failures.withLockedValue { $0.append("\(error)") } }
                result.append(File(path: file.path, uid: file.uid, source: file.source, units: file.blocks))
            }
            files.removeAll()
        }
        return result.sorted { $0.path < $1.path }
    }
}
