internal import CSCTP
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// One SCTP association over a DTLS transport ([RFC 8261](https://www.rfc-editor.org/rfc/rfc8261)),
/// run by libusrsctp in its AF_CONN mode (the `CSCTP` shim): SCTP packets it makes go to
/// ``onOutput`` for DTLS to carry, and what DTLS decrypts goes in with ``input(_:)``.
///
/// How it meets the event loops: usrsctp has no threads of its own here. Its timers run on one
/// thread of the process (``SCTPTimers``, every 10 ms), and every call into it, from that thread or
/// from a transport's loop, holds one process-wide lock. The callbacks run inside those calls, on
/// whichever thread made them: the owner's closures must not call back into this association
/// synchronously, and hop to their own loop when they are not on it (a retransmission comes from
/// the timer thread).
public final class SCTPAssociation: @unchecked Sendable {
    /// An SCTP packet for DTLS to carry to the peer.
    public var onOutput: (@Sendable ([UInt8]) -> Void)?
    /// A whole message: stream, payload protocol id, bytes.
    public var onMessage: (@Sendable (UInt16, UInt32, [UInt8]) -> Void)?
    /// The association came up (true) or went down (false).
    public var onState: (@Sendable (Bool) -> Void)?
    /// The peer reset one of its outgoing streams (closed the channel on it).
    public var onStreamReset: (@Sendable (UInt16) -> Void)?

    public let maxMessageSize: Int
    private var sctp: OpaquePointer?
    private let lock = NIOLock()

    public struct Error: Swift.Error, Sendable, Hashable, CustomStringConvertible {
        public let description: String
        /// The errno-like code usrsctp gave (EMSGSIZE: too large; ENOBUFS/EWOULDBLOCK: send buffer full).
        public let code: Int32
    }

    /// - Parameters: the SCTP ports of the two ends (`a=sctp-port`, 5000 unless the SDP says),
    ///   and the largest message either way (`a=max-message-size`).
    public init(localPort: UInt16 = 5000, remotePort: UInt16 = 5000, maxMessageSize: Int = 262_144) throws(Error) {
        self.maxMessageSize = maxMessageSize
        SCTPTimers.start()
        var message = [CChar](repeating: 0, count: 256)
        let owner = Unmanaged.passUnretained(self).toOpaque()
        let callbacks = rtc_sctp_callbacks(
            output: { owner, packet, length in
                guard let owner, let packet else { return }
                let association = Unmanaged<SCTPAssociation>.fromOpaque(owner).takeUnretainedValue()
                association.onOutput?(Array(UnsafeBufferPointer(start: packet, count: length)))
            },
            message: { owner, stream, ppid, data, length in
                guard let owner else { return }
                let association = Unmanaged<SCTPAssociation>.fromOpaque(owner).takeUnretainedValue()
                let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: length)) } ?? []
                association.onMessage?(stream, ppid, bytes)
            },
            state: { owner, up in
                guard let owner else { return }
                Unmanaged<SCTPAssociation>.fromOpaque(owner).takeUnretainedValue().onState?(up != 0)
            },
            stream_reset: { owner, stream in
                guard let owner else { return }
                Unmanaged<SCTPAssociation>.fromOpaque(owner).takeUnretainedValue().onStreamReset?(stream)
            })
        guard let made = rtc_sctp_create(owner, callbacks, localPort, remotePort, maxMessageSize, &message, message.count) else {
            throw Error(description: String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), code: 0)
        }
        sctp = made
    }

    deinit {
        if let sctp {
            rtc_sctp_silence(sctp)
            rtc_sctp_free(sctp)
        }
    }

    /// Sends INIT. Both ends do (as browsers do); SCTP settles the collision.
    public func connect() {
        lock.withLock { if let sctp { _ = rtc_sctp_connect(sctp) } }
    }

    /// One SCTP packet DTLS decrypted from the peer. Bytes that are not SCTP are dropped by usrsctp.
    public func input(_ packet: [UInt8]) {
        lock.withLock {
            guard let sctp else { return }
            packet.withUnsafeBufferPointer { rtc_sctp_input(sctp, $0.baseAddress, $0.count) }
        }
    }

    /// Queues a message on `stream`.
    public func send(stream: UInt16, ppid: UInt32, _ data: [UInt8], ordered: Bool = true,
                     reliability: DCEPMessage.Reliability = .reliable) throws(Error) {
        let (policy, value): (Int32, UInt32) = switch reliability {
        case .reliable: (0, 0)
        case .maxRetransmits(let count): (1, count)
        case .maxPacketLifeTime(let ms): (2, ms)
        }
        var code: Int32 = 0
        let result: Int32 = lock.withLock {
            guard let sctp else {
                code = ENOTCONN
                return -1
            }
            return data.withUnsafeBufferPointer {
                rtc_sctp_send(sctp, stream, ppid, $0.baseAddress, $0.count, ordered ? 0 : 1, policy, value, &code)
            }
        }
        guard result == 0 else {
            let reason = code == EMSGSIZE ? "message of \(data.count) bytes is over \(maxMessageSize)" : "send failed (errno \(code))"
            throw Error(description: reason, code: code)
        }
    }

    /// Resets the outgoing `stream`: the data channel on it is closed (RFC 8831 §6.7).
    public func resetStream(_ stream: UInt16) {
        lock.withLock { if let sctp { _ = rtc_sctp_reset_stream(sctp, stream) } }
    }

    /// Aborts the association (an ABORT goes out through ``onOutput``); nothing is called after.
    public func close() {
        lock.withLock {
            guard let sctp else { return }
            rtc_sctp_free(sctp)
            self.sctp = nil
        }
    }

    /// Feeds arbitrary bytes to a throwaway association: the shim's input path under fuzzing.
    public static func fuzzInput(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { rtc_sctp_fuzz_input($0.baseAddress, $0.count) }
    }
}

/// usrsctp's timers, for every association of the process: one thread that advances them every
/// 10 ms by the time that really passed. Started with the first association, kept for the process.
public enum SCTPTimers {
    private static let started = NIOLockedValueBox(false)

    static func start() {
        let first = started.withLockedValue { started in
            defer { started = true }
            return !started
        }
        guard first else { return }
        var thread = pthread_t()
        pthread_create(&thread, nil, { _ in
            var last = SCTPTimers.milliseconds()
            while true {
                usleep(10_000)
                let now = SCTPTimers.milliseconds()
                rtc_sctp_handle_timers(UInt32(truncatingIfNeeded: now - last))
                last = now
            }
        }, nil)
        pthread_detach(thread)
    }

    static func milliseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
    }
}
