import RTCCore
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

    /// A participant's WebM while it is written (or held until its streams' clocks are known).
    private final class ParticipantFile {
        let uid: String
        let screen: Bool
        let timeline: ParticipantTimeline
        var index: Int?
        var writer: WebMWriter?
        init(uid: String, screen: Bool, nowMonoUs: Int64) {
            self.uid = uid
            self.screen = screen
            timeline = ParticipantTimeline(nowMonoUs: nowMonoUs)
        }
    }

    let directory: String
    let options: ChannelRecorder.Options
    /// How often open files' headers get their current sizes (frame count, RIFF/data sizes).
    static let headerUpdateMs: Int64 = 1000
    private let report: (ChannelRecorder.Failure) -> Void
    private let note: (String) -> Void
    /// Open participant WebMs by uid and group (`1001` for camera and microphone, `1001 screen`).
    private var participants: [String: ParticipantFile] = [:]
    /// Kinds each participant group announced (the tracks its WebM waits for).
    private var announcedKinds: [String: [String: TrackKind]] = [:]

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
    /// Encrypted tracks this recorder could not open (listed in the manifest, nothing written).
    private var undecryptable: [RecordingManifest.Undecryptable] = []
    private var checkedOldManifest = false

    init(directory: String, options: ChannelRecorder.Options, report: @escaping (ChannelRecorder.Failure) -> Void,
         note: @escaping (String) -> Void) {
        self.directory = directory
        self.options = options
        self.report = report
        self.note = note
    }

    // MARK: media

    func wants(_ uid: String) -> Bool { options.uids?.contains(uid) ?? true }

    func record(_ frame: RemoteEncodedVideoFrame) {
        guard !stopped, wants(frame.uid), !done.contains(frame.trackSid) else { return }
        let file: OpenFile
        if let existing = open[frame.trackSid] {
            file = existing
        } else {
            // A file starts at a keyframe that carries the size.
            guard frame.isKeyframe, let width = frame.width, let height = frame.height else { return }
            endOthers(uid: frame.uid, source: frame.source, kind: .video, keeping: frame.trackSid)
            let header = IVFHeader(width: width, height: height, timebaseNumerator: 1, timebaseDenominator: 90000)
            guard let opened = start(uid: frame.uid, source: frame.source, kind: .video, sid: frame.trackSid, ext: "ivf", codec: "vp8",
                                     format: .ivf, makeWriter: { output throws(MediaFileError) in .video(try IVFWriter(output: output, header: header)) })
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
        guard !stopped, wants(frame.uid), !done.contains(frame.trackSid) else { return }
        let file: OpenFile
        if let existing = open[frame.trackSid] {
            file = existing
        } else {
            endOthers(uid: frame.uid, source: frame.source, kind: .audio, keeping: frame.trackSid)
            let rate = frame.frame.sampleRate, channels = frame.frame.channels
            guard let opened = start(uid: frame.uid, source: frame.source, kind: .audio, sid: frame.trackSid, ext: "wav", codec: "pcm_s16le",
                                     format: .wav, makeWriter: { output throws(MediaFileError) in
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

    // MARK: participant WebMs

    /// A WebM's sources for the manifest, video first: `camera+microphone`, `screen+screenAudio`.
    static func sourceList(_ sources: [TrackSource]) -> String {
        let order: [TrackSource] = [.camera, .microphone, .screen, .screenAudio]
        return order.filter(sources.contains).map(\.rawValue).joined(separator: "+")
    }

    /// Camera and microphone of a uid share one WebM; its screen and screen audio another.
    static func groupKey(_ uid: String, _ source: TrackSource) -> String {
        source == .screen || source == .screenAudio ? "\(uid) screen" : uid
    }

    func recordWebM(_ frame: RemoteEncodedVideoFrame) {
        if !stopped && wants(frame.uid) { feed(TimelineUnit(frame), uid: frame.uid) }
    }

    func recordWebM(_ frame: RemoteEncodedAudioFrame) {
        if !stopped && wants(frame.uid) { feed(TimelineUnit(frame), uid: frame.uid) }
    }

    /// Streams whose WebM could not be started or ended on an error: their units are dropped
    /// (a new stream of the participant tries a new file).
    private var failedStreams: Set<String> = []

    private func feed(_ unit: TimelineUnit, uid: String) {
        guard !failedStreams.contains(unit.sid) else { return }
        let key = Self.groupKey(uid, unit.source), now = unit.arrivalMonoUs
        if let current = participants[key], let writer = current.writer,
           unit.kind == .video ? writer.tracks.video == nil : !writer.tracks.audio {
            // A kind the open file has no track for: it ends, and a new segment starts with both.
            guard unit.kind == .audio || unit.keyframe else { return }
            endParticipant(key, .republished)
        }
        let participant = participants[key] ?? ParticipantFile(uid: uid, screen: key != uid, nowMonoUs: now)
        participants[key] = participant
        guard participant.timeline.add(unit) else { return }
        if !participant.timeline.isOpen {
            let expected = Set((announcedKinds[key] ?? [:]).values)
            guard participant.timeline.readyToOpen(expecting: expected, nowMonoUs: now), openParticipant(key, participant) else { return }
        }
        drainParticipant(key, participant, nowMonoUs: now)
    }

    /// Starts the participant's WebM with the tracks its held units have.
    private func openParticipant(_ key: String, _ participant: ParticipantFile) -> Bool {
        let timeline = participant.timeline, tracks = timeline.tracks
        var entry = ChannelRecorder.File(path: "", uid: participant.uid, source: Self.sourceList(timeline.sources),
                                         units: 0)
        entry.format = .webm
        entry.kind = tracks.video != nil ? .video : .audio
        entry.hasAudio = tracks.audio
        entry.codec = [tracks.video != nil ? "vp8" : nil, tracks.audio ? "opus" : nil].compactMap { $0 }.joined(separator: "+")
        entry.trackSid = timeline.sids.joined(separator: ",")
        var writer: WebMWriter?
        let base = Self.safe(participant.uid) + (participant.screen ? "-screen" : "")
        guard let created = create(base: base, ext: "webm", entry: entry, prepare: { output throws(MediaFileError) in
            writer = try WebMWriter(output: output, tracks: tracks)
        }), let writer else {
            participants[key] = nil
            failedStreams.formUnion(timeline.sids)
            return false
        }
        timeline.open()
        participant.index = created.index
        participant.writer = writer
        files[created.index].synchronization = timeline.syncedBySenderReports ? .senderReports : .arrival
        return true
    }

    /// Hands the participant's due units to its WebM (all of them with `everything`).
    private func drainParticipant(_ key: String, _ participant: ParticipantFile, nowMonoUs: Int64, everything: Bool = false) {
        guard let writer = participant.writer, let index = participant.index else { return }
        var first: Int64?, last: Int64?
        do throws(MediaFileError) {
            try participant.timeline.drain(nowMonoUs: nowMonoUs, everything: everything) { unit, pts throws(MediaFileError) in
                if unit.kind == .video {
                    try writer.writeVideo(unit.data, ptsMs: pts, keyframe: unit.keyframe)
                } else {
                    try writer.writeAudio(unit.data, ptsMs: pts)
                }
                if first == nil { first = unit.arrivalWallUs / 1000 }
                last = unit.arrivalWallUs / 1000
            }
        } catch {
            let at = [writer.tracks.video != nil ? "frame \(writer.handed.videoFrames)" : nil,
                      writer.tracks.audio ? "audio at \(writer.handed.audioEndMs ?? 0) ms" : nil].compactMap { $0 }
            failParticipant(key, error, while: "writing \(at.joined(separator: ", "))")
        }
        let timeline = participant.timeline
        // What is in the file (whole clusters), not what the muxer holds.
        files[index].units = writer.committed.videoFrames
        files[index].durationMs = writer.committed.audioDurationMs
        files[index].trackSid = timeline.sids.joined(separator: ",")
        files[index].source = Self.sourceList(timeline.sources)
        if files[index].firstArrivalMs == nil { files[index].firstArrivalMs = first }
        if let last { files[index].lastArrivalMs = last }
        if timeline.syncedBySenderReports == false { files[index].synchronization = .arrival }
        files[index].discountedSenderReports = timeline.discountedReports
    }

    private func failParticipant(_ key: String, _ error: MediaFileError, while doing: String) {
        guard let participant = participants[key], let index = participant.index else { return }
        if error.kind == .noSpace { releaseSpace() }
        let reason: ChannelRecorder.EndReason = error.kind == .noSpace ? .diskFull : .writeFailed
        files[index].error = "\(doing): \(error.message)"
        failedStreams.formUnion(participant.timeline.sids)
        endParticipant(key, reason, drain: false)
        let entry = files[index]
        let kept = [entry.kind == .video ? "\(entry.frames) frames" : nil, entry.holdsAudio ? "\(entry.durationMs) ms of audio" : nil]
        report(ChannelRecorder.Failure(file: entry, message: "recording \(entry.path) ended (\(reason.rawValue)) \(doing): "
                                           + "\(error.message); the \(kept.compactMap { $0 }.joined(separator: " and ")) before it are kept and readable"))
    }

    /// Ends a participant's WebM: what is held is written (a file still holding its first units
    /// starts now), the last cluster closed.
    private func endParticipant(_ key: String, _ reason: ChannelRecorder.EndReason, writeManifest rewrite: Bool = true, drain: Bool = true) {
        guard let participant = participants[key] else { return }
        if drain {
            if !participant.timeline.isOpen && !participant.timeline.kindsPending.isEmpty { _ = openParticipant(key, participant) }
            drainParticipant(key, participant, nowMonoUs: MediaClock.monotonicUs(), everything: true)
        }
        // Draining may have failed and ended it already.
        guard let current = participants.removeValue(forKey: key), current === participant, let index = participant.index,
              let writer = participant.writer else { return }
        files[index].ended = reason
        defer {
            files[index].units = writer.committed.videoFrames
            files[index].durationMs = writer.committed.audioDurationMs
        }
        do throws(MediaFileError) {
            try writer.finish()
        } catch {
            if files[index].error == nil {
                files[index].error = "closing: \(error.message)"
                files[index].ended = error.kind == .noSpace ? .diskFull : .writeFailed
                report(ChannelRecorder.Failure(file: files[index], message: "cannot finish \(files[index].path): \(error.message)"))
            }
        }
        if rewrite { writeManifest() }
    }

    // MARK: events

    func handle(_ event: RTCEngineEvent) {
        guard !stopped else { return }
        switch event {
        case .decryptionFailed(let uid, let trackSid, let reason):
            guard !undecryptable.contains(where: { $0.trackSid == trackSid }) else { return }
            undecryptable.append(RecordingManifest.Undecryptable(uid: uid, trackSid: trackSid, reason: reason))
            writeManifest()
        case .remoteTrackPublished(let info):
            announced[info.uid, default: []].insert(info.trackSid)
            everAnnounced.insert(info.uid)
            announcedKinds[Self.groupKey(info.uid, info.source), default: [:]][info.trackSid] = info.kind
        case .remoteTrackUnpublished(let info):
            announced[info.uid]?.remove(info.trackSid)
            announcedKinds[Self.groupKey(info.uid, info.source)]?[info.trackSid] = nil
            end(info.trackSid, .unpublished)
        case .userOffline(let uid, _):
            // Only the tracks announced before this event: a new session of the same uid whose
            // frames are already here (its announcement still queued behind this) keeps recording.
            let known = announced.removeValue(forKey: uid) ?? []
            let everKnown = everAnnounced.contains(uid)
            for (sid, file) in open where files[file.index].uid == uid && (!everKnown || known.contains(sid)) {
                end(sid, .left)
            }
            for (key, participant) in participants where participant.uid == uid
                && (!everKnown || participant.timeline.sids.allSatisfy(known.contains)) {
                endParticipant(key, .left)
            }
            announcedKinds[Self.groupKey(uid, .camera)] = nil
            announcedKinds[Self.groupKey(uid, .screen)] = nil
        case .leftChannel:
            for sid in open.keys { end(sid, .stopped) }
            for key in participants.keys { endParticipant(key, .stopped) }
        default:
            break
        }
    }

    /// Ends every file (reason `stopped`), writes the manifest, and takes no more media.
    func stop() -> [ChannelRecorder.File] {
        guard !stopped else { return files }
        for sid in open.keys.sorted() { end(sid, .stopped, writeManifest: false) }
        for key in participants.keys.sorted() { endParticipant(key, .stopped, writeManifest: false) }
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

    private static func safe(_ uid: String) -> String {
        String(uid.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" ? $0 : "_" })
    }

    private func baseName(_ uid: String, _ source: TrackSource) -> String { "\(Self.safe(uid))-\(source.rawValue)" }

    /// Opens the next free segment name (`base.ext`, `base.2.ext`, …) with `O_EXCL`: a file already
    /// in the folder is skipped, never truncated.
    private func start(uid: String, source: TrackSource, kind: TrackKind, sid: String, ext: String, codec: String,
                       format: ChannelRecorder.Format, makeWriter: (DirectFileOutput) throws(MediaFileError) -> Writer) -> OpenFile? {
        var entry = ChannelRecorder.File(path: "", uid: uid, source: source.rawValue, units: 0)
        entry.kind = kind
        entry.codec = codec
        entry.trackSid = sid
        entry.format = format
        var writer: Writer?
        guard let created = create(base: baseName(uid, source), ext: ext, entry: entry, prepare: { output throws(MediaFileError) in
            writer = try makeWriter(output)
        }), let writer else {
            done.insert(sid)
            return nil
        }
        let file = OpenFile(index: created.index, writer: writer, output: created.output)
        open[sid] = file
        return file
    }

    /// Creates the next free segment of `base.ext` for `entry` and lets `prepare` start it (write a
    /// header): the entry is listed, the manifest rewritten, and its index and output returned. On
    /// failure the entry is listed as ended with the error, `onError` told, and nil returned.
    private func create(base: String, ext: String, entry: ChannelRecorder.File,
                        prepare: (DirectFileOutput) throws(MediaFileError) -> Void) -> (index: Int, output: DirectFileOutput)? {
        if !checkedOldManifest {
            checkedOldManifest = true
            if let aside = RecordingManifest.moveAside(directory: directory) {
                note("an earlier manifest.json in \(directory) was moved to \(aside)")
            }
            reserveSpace()
        }
        var number = nextSegment["\(base).\(ext)"] ?? 1
        var entry = entry
        while true {
            let name = number == 1 ? "\(base).\(ext)" : "\(base).\(number).\(ext)"
            entry.name = name
            entry.path = "\(directory)/\(name)"
            entry.segment = number
            do throws(MediaFileError) {
                let output = try DirectFileOutput(path: entry.path, exclusive: true)
                nextSegment["\(base).\(ext)"] = number + 1
                do throws(MediaFileError) {
                    try prepare(output)
                } catch {
                    try? output.close()
                    throw error
                }
                files.append(entry)
                writeManifest()
                return (files.count - 1, output)
            } catch where error.kind == .exists && number < 100_000 {
                number += 1
            } catch {
                nextSegment["\(base).\(ext)"] = number + 1
                if error.kind == .noSpace { releaseSpace() }
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
            try RecordingManifest.write(RecordingManifest.json(files, undecryptable: undecryptable), directory: directory)
            manifestFailing = false
        } catch {
            // One line when it starts failing (a full disk), not one per rewrite.
            if !manifestFailing { note("cannot update \(directory)/\(RecordingManifest.name): \(error.message)") }
            manifestFailing = true
        }
    }
}
