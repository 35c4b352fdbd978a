import Signaling

#if canImport(Glibc)
import Glibc
#endif

/// The recorder's files and bookkeeping, touched only on the recorder's own writer thread: no lock
/// is held while a file is written, and no decode or playout thread waits for the disk.
final class RecorderState: @unchecked Sendable {
    private enum Writer {
        case video(IVFWriter)
        case audio(WAVWriter)
    }

    private final class OpenFile {
        let index: Int
        let writer: Writer
        let output: DirectFileOutput
        var firstTimestamp: UInt32 = 0
        var lastHeaderUpdate: Int64
        var samples = 0
        var sampleRate = 48000
        init(index: Int, writer: Writer, output: DirectFileOutput) {
            self.index = index
            self.writer = writer
            self.output = output
            lastHeaderUpdate = monotonicMs()
        }
    }

    let directory: String
    /// How often open files' headers get their current sizes (frame count, RIFF/data sizes).
    static let headerUpdateMs: Int64 = 1000
    private let report: (ChannelRecorder.Failure) -> Void
    private let note: (String) -> Void

    /// Every file started, in order; open ones are updated as they grow.
    private(set) var files: [ChannelRecorder.File] = []
    private var open: [String: OpenFile] = [:]
    /// Tracks whose file ended or could not be opened: late frames of theirs are dropped.
    private var done: Set<String> = []
    /// Track sids the event stream announced per uid, and the uids it announced any for.
    private var announced: [String: Set<String>] = [:]
    private var everAnnounced: Set<String> = []
    /// Next segment number to try per base name (`1001-camera.ivf`).
    private var nextSegment: [String: Int] = [:]
    private var stopped = false
    private var manifestFailing = false
    private var checkedOldManifest = false

    init(directory: String, report: @escaping (ChannelRecorder.Failure) -> Void, note: @escaping (String) -> Void) {
        self.directory = directory
        self.report = report
        self.note = note
    }

    // MARK: media

    func record(_ frame: RemoteEncodedVideoFrame) {
        guard !stopped, !done.contains(frame.trackSid) else { return }
        let file: OpenFile
        if let existing = open[frame.trackSid] {
            file = existing
        } else {
            // A file starts at a keyframe that carries the size.
            guard frame.isKeyframe, let width = frame.width, let height = frame.height else { return }
            endOthers(uid: frame.uid, source: frame.source, kind: .video, keeping: frame.trackSid)
            let header = IVFHeader(width: width, height: height, timebaseNumerator: 1, timebaseDenominator: 90000)
            guard let opened = start(uid: frame.uid, source: frame.source, kind: .video, sid: frame.trackSid, ext: "ivf", codec: "vp8",
                                     makeWriter: { output throws(MediaFileError) in .video(try IVFWriter(output: output, header: header)) })
            else { return }
            opened.firstTimestamp = frame.rtpTimestamp
            file = opened
        }
        guard case .video(let writer) = file.writer else { return }
        do throws(MediaFileError) {
            try writer.write(frame.data, timestamp: UInt64(frame.rtpTimestamp &- file.firstTimestamp))
        } catch {
            fail(frame.trackSid, error, while: "writing frame \(files[file.index].units + 1)")
            return
        }
        arrived(file, units: 1)
    }

    func record(_ frame: RemoteAudioFrame) {
        guard !stopped, !done.contains(frame.trackSid) else { return }
        let file: OpenFile
        if let existing = open[frame.trackSid] {
            file = existing
        } else {
            endOthers(uid: frame.uid, source: frame.source, kind: .audio, keeping: frame.trackSid)
            let rate = frame.frame.sampleRate, channels = frame.frame.channels
            guard let opened = start(uid: frame.uid, source: frame.source, kind: .audio, sid: frame.trackSid, ext: "wav", codec: "pcm_s16le",
                                     makeWriter: { output throws(MediaFileError) in
                                         .audio(try WAVWriter(output: output, sampleRate: rate, channels: channels))
                                     })
            else { return }
            opened.sampleRate = rate
            file = opened
        }
        guard case .audio(let writer) = file.writer else { return }
        do throws(MediaFileError) {
            try writer.write(frame.frame)
        } catch {
            fail(frame.trackSid, error, while: "writing audio at \(files[file.index].durationMs) ms")
            return
        }
        file.samples += frame.frame.samplesPerChannel
        files[file.index].durationMs = Int(Int64(file.samples) * 1000 / Int64(max(file.sampleRate, 1)))
        arrived(file, units: 1)
    }

    private func arrived(_ file: OpenFile, units: Int) {
        let now = wallClockMs()
        files[file.index].units += units
        if files[file.index].firstArrivalMs == nil { files[file.index].firstArrivalMs = now }
        files[file.index].lastArrivalMs = now
        let tick = monotonicMs()
        // The first unit, then once a second: headers declare what is in the file.
        if files[file.index].units == 1 || tick - file.lastHeaderUpdate >= Self.headerUpdateMs {
            file.lastHeaderUpdate = tick
            do throws(MediaFileError) {
                switch file.writer {
                case .video(let writer): try writer.updateHeader()
                case .audio(let writer): try writer.updateHeader()
                }
            } catch {
                let sid = files[file.index].trackSid
                fail(sid, error, while: "updating the header")
            }
        }
    }

    // MARK: events

    func handle(_ event: RTCEngineEvent) {
        guard !stopped else { return }
        switch event {
        case .remoteTrackPublished(let info):
            announced[info.uid, default: []].insert(info.trackSid)
            everAnnounced.insert(info.uid)
        case .remoteTrackUnpublished(let info):
            announced[info.uid]?.remove(info.trackSid)
            end(info.trackSid, .unpublished)
        case .userOffline(let uid, _):
            // Only the tracks announced before this event: a new session of the same uid whose
            // frames are already here (its announcement still queued behind this) keeps recording.
            let known = announced.removeValue(forKey: uid) ?? []
            let everKnown = everAnnounced.contains(uid)
            for (sid, file) in open where files[file.index].uid == uid && (!everKnown || known.contains(sid)) {
                end(sid, .left)
            }
        case .leftChannel:
            for sid in open.keys { end(sid, .stopped) }
        default:
            break
        }
    }

    /// Ends every file (reason `stopped`), writes the manifest, and takes no more media.
    func stop() -> [ChannelRecorder.File] {
        guard !stopped else { return files }
        for sid in open.keys.sorted() { end(sid, .stopped, writeManifest: false) }
        stopped = true
        releaseSpace()
        writeManifest()
        return files
    }

    // MARK: files

    /// A newer track for the same user and source means the old one was replaced.
    private func endOthers(uid: String, source: TrackSource, kind: TrackKind, keeping sid: String) {
        for (other, file) in open where other != sid {
            let entry = files[file.index]
            if entry.uid == uid, entry.source == source.rawValue, entry.kind == kind { end(other, .republished) }
        }
    }

    private func baseName(_ uid: String, _ source: TrackSource) -> String {
        let safe = String(uid.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" ? $0 : "_" })
        return "\(safe)-\(source.rawValue)"
    }

    /// Opens the next free segment name (`base.ext`, `base.2.ext`, …) with `O_EXCL`: a file already
    /// in the folder is skipped, never truncated.
    private func start(uid: String, source: TrackSource, kind: TrackKind, sid: String, ext: String, codec: String,
                       makeWriter: (DirectFileOutput) throws(MediaFileError) -> Writer) -> OpenFile? {
        if !checkedOldManifest {
            checkedOldManifest = true
            if let aside = RecordingManifest.moveAside(directory: directory) {
                note("an earlier manifest.json in \(directory) was moved to \(aside)")
            }
            reserveSpace()
        }
        let base = baseName(uid, source)
        var number = nextSegment["\(base).\(ext)"] ?? 1
        var entry = ChannelRecorder.File(path: "", uid: uid, source: source.rawValue, units: 0)
        entry.kind = kind
        entry.codec = codec
        entry.trackSid = sid
        while true {
            let name = number == 1 ? "\(base).\(ext)" : "\(base).\(number).\(ext)"
            entry.name = name
            entry.path = "\(directory)/\(name)"
            entry.segment = number
            do throws(MediaFileError) {
                let output = try DirectFileOutput(path: entry.path, exclusive: true)
                nextSegment["\(base).\(ext)"] = number + 1
                let writer: Writer
                do throws(MediaFileError) {
                    writer = try makeWriter(output)
                } catch {
                    try? output.close()
                    throw error
                }
                files.append(entry)
                let file = OpenFile(index: files.count - 1, writer: writer, output: output)
                open[sid] = file
                writeManifest()
                return file
            } catch where error.kind == .exists && number < 100_000 {
                number += 1
            } catch {
                nextSegment["\(base).\(ext)"] = number + 1
                if error.kind == .noSpace { releaseSpace() }
                done.insert(sid)
                entry.ended = error.kind == .noSpace ? .diskFull : .writeFailed
                entry.error = error.message
                files.append(entry)
                report(ChannelRecorder.Failure(file: entry, message: "cannot start \(entry.path): \(error.message)"))
                writeManifest()
                return nil
            }
        }
    }

    /// A few kilobytes held in `.recorder-reserve` while recording and given back when the disk
    /// fills, so the manifest can still be rewritten to say where each file ended.
    private static let reserveName = ".recorder-reserve", reserveBytes = 32 * 1024
    private var reserved = false

    private func reserveSpace() {
        guard let output = try? DirectFileOutput(path: "\(directory)/\(Self.reserveName)", exclusive: false) else { return }
        reserved = (try? output.write([UInt8](repeating: 0, count: Self.reserveBytes))) != nil
        try? output.close()
        if !reserved { releaseSpace() }
    }

    private func releaseSpace() {
        reserved = false
        unlink("\(directory)/\(Self.reserveName)")
    }

    private func fail(_ sid: String, _ error: MediaFileError, while doing: String) {
        guard let file = open[sid] else { return }
        if error.kind == .noSpace { releaseSpace() }
        let reason: ChannelRecorder.EndReason = error.kind == .noSpace ? .diskFull : .writeFailed
        files[file.index].error = "\(doing): \(error.message)"
        end(sid, reason)
        let entry = files[file.index]
        let kept = entry.kind == .video ? "\(entry.units) frames" : "\(entry.durationMs) ms"
        report(ChannelRecorder.Failure(file: entry, message: "recording \(entry.path) ended (\(reason.rawValue)) \(doing): "
                                           + "\(error.message); the \(kept) before it are kept and readable"))
    }

    private func end(_ sid: String, _ reason: ChannelRecorder.EndReason, writeManifest rewrite: Bool = true) {
        done.insert(sid)
        guard let file = open.removeValue(forKey: sid) else { return }
        files[file.index].ended = reason
        do throws(MediaFileError) {
            switch file.writer {
            case .video(let writer): try writer.finish()
            case .audio(let writer): try writer.finish()
            }
        } catch {
            // Closing after a failure can fail again; the first error is the one that counts.
            if files[file.index].error == nil {
                files[file.index].error = "closing: \(error.message)"
                files[file.index].ended = error.kind == .noSpace ? .diskFull : .writeFailed
                report(ChannelRecorder.Failure(file: files[file.index], message: "cannot finish \(files[file.index].path): \(error.message)"))
            }
        }
        if rewrite { writeManifest() }
    }

    func writeManifest() {
        do throws(MediaFileError) {
            try RecordingManifest.write(RecordingManifest.json(files), directory: directory)
            manifestFailing = false
        } catch {
            // One line when it starts failing (a full disk), not one per rewrite.
            if !manifestFailing { note("cannot update \(directory)/\(RecordingManifest.name): \(error.message)") }
            manifestFailing = true
        }
    }
}
