import CWebM
import RTCCore

/// One WebM file of already-encoded VP8 and Opus (libavformat's Matroska muxer through `CWebM`),
/// written through a ``DirectFileOutput``: the header at once, then each cluster whole, in one
/// unbuffered write as the muxer closes it (about once a second, and at video keyframes). A
/// process killed mid-stream leaves a file that ends at a cluster boundary, readable up to there.
/// Segment and clusters are of unknown size (live WebM), so nothing is rewritten later.
public final class WebMWriter {
    public struct Tracks: Equatable, Sendable {
        /// The VP8 track's first size (later keyframes may change it), nil for none.
        public var video: VideoSize?
        /// Whether there is an Opus track (stereo, 48 kHz).
        public var audio: Bool

        public init(video: VideoSize?, audio: Bool) {
            self.video = video
            self.audio = audio
        }
    }

    /// What the file holds: video frames and audio packets, and the audio's span in milliseconds.
    public struct Contents: Equatable, Sendable {
        public var videoFrames = 0
        public var audioPackets = 0
        public var firstAudioMs: Int64?
        public var audioEndMs: Int64?
        public var audioDurationMs: Int { firstAudioMs.flatMap { first in audioEndMs.map { Int($0 - first) } } ?? 0 }
    }

    public let tracks: Tracks
    private let output: DirectFileOutput
    private var muxer: OpaquePointer?
    public private(set) var bytesWritten = 0
    /// What was handed to the muxer, and what of it is in the file. A cluster reaches the file
    /// when the muxer ends it, as the next frame arrives: everything handed before that frame.
    public private(set) var handed = Contents()
    public private(set) var committed = Contents()
    /// A write to the file failed: nothing more is written (a later cluster after a lost one would
    /// leave a hole), `finish()` only closes.
    private var failed = false
    /// Where the shim writes an error message (one buffer, not one per frame).
    private var error = [CChar](repeating: 0, count: 256)

    /// Opus pre-skip of libopus encoders (RFC 7845 §4.2: the encoder's lookahead at 48 kHz).
    public static let opusPreSkip = 312

    /// Starts the file (its header is written at once). `clusterMs`: how long a cluster may grow
    /// before the next frame starts another (what a killed process may lose at most).
    public init(output: DirectFileOutput, tracks: Tracks, clusterMs: Int = 500) throws(MediaFileError) {
        self.output = output
        self.tracks = tracks
        var config = rtc_webm_config(has_video: tracks.video == nil ? 0 : 1, width: Int32(tracks.video?.width ?? 0),
                                     height: Int32(tracks.video?.height ?? 0), has_audio: tracks.audio ? 1 : 0, audio_channels: 2,
                                     opus_pre_skip: Int32(Self.opusPreSkip), cluster_ms: Int32(clusterMs))
        var message = [CChar](repeating: 0, count: 256)
        guard let made = rtc_webm_create(&config, &message, message.count) else {
            throw MediaFileError(.invalidArgument, "\(output.path): \(Self.text(message))")
        }
        muxer = made
        try flush()
    }

    deinit {
        if let muxer { rtc_webm_free(muxer) }
    }

    /// One whole VP8 frame at `ptsMs` on the file's timeline (never earlier than the last).
    public func writeVideo(_ data: [UInt8], ptsMs: Int64, keyframe: Bool) throws(MediaFileError) {
        let before = handed
        handed.videoFrames += 1
        try write(track: Int32(RTC_WEBM_VIDEO), data, ptsMs: ptsMs, keyframe: keyframe, before: before)
    }

    /// One Opus packet of `durationMs` (20 from WebRTC senders).
    public func writeAudio(_ data: [UInt8], ptsMs: Int64, durationMs: Int64 = 20) throws(MediaFileError) {
        let before = handed
        handed.audioPackets += 1
        if handed.firstAudioMs == nil { handed.firstAudioMs = ptsMs }
        handed.audioEndMs = ptsMs + durationMs
        try write(track: Int32(RTC_WEBM_AUDIO), data, ptsMs: ptsMs, keyframe: true, before: before)
    }

    /// Ends the last cluster and closes the file (after a failed write: only closes, the file
    /// ending at its last whole cluster). Safe to call again.
    public func finish() throws(MediaFileError) {
        guard let muxer else { return }
        defer {
            rtc_webm_free(muxer)
            self.muxer = nil
        }
        if failed {
            try? output.close()
            return
        }
        let capacity = error.count
        if rtc_webm_finish(muxer, &error, capacity) != 0 {
            try? output.close()
            throw MediaFileError(.io, "\(output.path): \(Self.text(error))")
        }
        do throws(MediaFileError) {
            if try flush() { committed = handed }
        } catch {
            try? output.close()
            throw error
        }
        try output.close()
    }

    private func write(track: Int32, _ data: [UInt8], ptsMs: Int64, keyframe: Bool, before: Contents) throws(MediaFileError) {
        guard let muxer, !failed else { throw MediaFileError(.io, "cannot write \(output.path): already finished or failed") }
        let capacity = error.count
        let status = data.withUnsafeBufferPointer { bytes in
            rtc_webm_write(muxer, track, bytes.baseAddress, bytes.count, ptsMs, keyframe ? 1 : 0, &error, capacity)
        }
        guard status == 0 else { throw MediaFileError(.invalidArgument, "\(output.path): \(Self.text(error))") }
        if try flush() { committed = before }
    }

    /// Writes what the muxer produced (nothing, the header, or a whole cluster) in one go; says
    /// whether there was anything.
    @discardableResult
    private func flush() throws(MediaFileError) -> Bool {
        guard let muxer else { return false }
        var size = 0
        guard let bytes = rtc_webm_pending(muxer, &size), size > 0 else { return false }
        defer { rtc_webm_clear_pending(muxer) }
        do throws(MediaFileError) {
            try output.write(UnsafeRawBufferPointer(start: bytes, count: size))
        } catch {
            failed = true
            throw error
        }
        bytesWritten += size
        return true
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
