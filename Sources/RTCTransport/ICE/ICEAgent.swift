import NIOCore

/// The connectivity state of an ICE agent.
public enum ICEState: Sendable, Hashable {
    case new
    case checking
    case connected
    /// Consent checks went unanswered for a while; media may still flow once they are answered again.
    case disconnected(reason: String)
    case failed(reason: String)
    case closed
}

/// What an agent asks its transport to do.
public struct ICEOutput: Sendable {
    /// Datagrams to send, each to an address.
    public var datagrams: [(bytes: [UInt8], to: SocketAddress)] = []
    /// Set when the selected address changed (first nomination, or the peer's port moved).
    public var selectedAddress: SocketAddress?
    /// Set when the state changed.
    public var state: ICEState?

    public init() {}
}

/// Timers of an ICE agent, in seconds.
public struct ICETimers: Sendable, Hashable {
    /// First check retransmission delay; doubled after each try up to ``maxRetransmit`` (RFC 8489 §6.2.1).
    public var initialRetransmit: Double = 0.1
    public var maxRetransmit: Double = 1.6
    /// No answer to any check for this long fails the agent ("no STUN answer").
    public var connectTimeout: Double = 10
    /// Consent freshness interval (RFC 7675 §5.1: 4–6 s randomized; 5 s here).
    public var consentInterval: Double = 5
    /// Unanswered consent for this long reports `disconnected`.
    public var disconnectAfter: Double = 10
    /// ... and for this long `failed` (RFC 7675: 30 s).
    public var consentTimeout: Double = 30

    public init() {}
}

/// How a candidate ranks against others (RFC 8445 §5.1.2.2's type preferences, as this client
/// checks them): direct UDP first, then ICE-TCP, then a TURN relay. Lower is better.
public enum CandidatePreference: Int, Sendable, Comparable {
    case direct, tcp, relayed

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// An ICE agent for one component over one socket, with the clock passed in (`now`, seconds):
/// the full controlling side with aggressive nomination and consent freshness (client), or
/// ICE-lite (server), which only answers checks and follows the peer's address.
///
/// Not thread-safe: own one per transport, on its event loop.
public final class ICEAgent {
    public enum Role: Sendable, Hashable {
        /// Full ICE, controlling: sends checks with USE-CANDIDATE to the remote candidates.
        case controlling
        /// ICE-lite: answers checks; the address of the latest authenticated nominating check wins.
        case lite
    }

    public let role: Role
    public private(set) var local: ICECredentials
    public private(set) var remote: ICECredentials?
    public private(set) var state: ICEState = .new
    /// Where media goes: the nominated remote address.
    public private(set) var selectedAddress: SocketAddress?
    /// What the peer saw our checks on the selected pair come from (the XOR-MAPPED-ADDRESS of its
    /// answer): our own address, or a NAT's mapping of it.
    public private(set) var mappedAddress: SocketAddress?
    /// Round-trip time of the latest answered check, seconds.
    public private(set) var roundTripTime: Double?
    public let timers: ICETimers
    private let tieBreaker: UInt64

    private struct Transaction {
        var bytes: [UInt8]
        var to: SocketAddress
        /// Sent with USE-CANDIDATE.
        var nominating: Bool
        var sentAt: Double
        var firstSentAt: Double
        var nextRetransmit: Double
        var interval: Double
    }
    private var transactions: [[UInt8]: Transaction] = [:]
    private var remoteCandidates: [SocketAddress] = []
    /// Candidates checked at a lower priority (ICE-TCP, relayed), by how much lower: without
    /// USE-CANDIDATE until one of them is the best path that answered, and left for a better one
    /// that answers.
    private var lowerPriority: [SocketAddress: CandidatePreference] = [:]
    private var startedAt: Double?
    private var lastConsent: Double?
    private var nextConsentCheck: Double?
    /// Credentials changed at least once (RFC 8445 §9): error answers no longer fail checks.
    private var restarted = false

    public init(role: Role, local: ICECredentials = .random(), timers: ICETimers = ICETimers()) {
        self.role = role
        self.local = local
        self.timers = timers
        var tie: UInt64 = 0
        for byte in STUNMessage.randomTransactionID().prefix(8) { tie = tie << 8 | UInt64(byte) }
        tieBreaker = tie
    }

    /// Sets the remote credentials and, for the controlling side, the candidates to check, and starts.
    public func start(remote: ICECredentials, candidates: [SocketAddress], now: Double) -> ICEOutput {
        self.remote = remote
        remoteCandidates = candidates
        var output = ICEOutput()
        startedAt = now
        setState(.checking, &output)
        if role == .controlling {
            for candidate in candidates { sendCheck(to: candidate, nominate: lowerPriority[candidate] == nil, now: now, &output) }
        }
        return output
    }

    /// ICE restart (RFC 8445 §9): new local credentials (and the peer's new ones); checks start over.
    public func restart(local: ICECredentials, remote: ICECredentials, candidates: [SocketAddress], now: Double) -> ICEOutput {
        self.local = local
        restarted = true
        transactions.removeAll()
        answered.removeAll()
        lastConsent = nil
        nextConsentCheck = nil
        return start(remote: remote, candidates: candidates, now: now)
    }

    /// A remote candidate found after the start (an ICE-TCP connection to the peer's passive
    /// candidate, a relayed path): checks go to it now. Checks to `stopping` end, so the peer
    /// (ICE-lite, which follows the latest nomination) is not pulled back to a path that was silent.
    ///
    /// A candidate of a lower `preference` (ICE-TCP, relayed) is checked beside the others without
    /// nominating it: an ICE-lite peer takes a check's source only while it has no path, and a
    /// nominating check always wins, so the peer cannot flip to it while another path answers.
    /// Once it answers and no better candidate has, it is selected and nominated (a check with
    /// USE-CANDIDATE on it, at once); should a better candidate answer later (direct UDP over
    /// ICE-TCP over a relay, as RFC 8445's type preferences rank them), the agent moves there and
    /// nominates that one.
    public func addCandidate(_ address: SocketAddress, stopping: [SocketAddress] = [],
                             preference: CandidatePreference = .direct, now: Double) -> ICEOutput {
        var output = ICEOutput()
        guard role == .controlling, remote != nil else { return output }
        switch state {
        case .failed, .closed: return output
        default: break
        }
        transactions = transactions.filter { !stopping.contains($0.value.to) }
        if !remoteCandidates.contains(address) { remoteCandidates.append(address) }
        lowerPriority[address] = preference == .direct ? nil : preference
        sendCheck(to: address, nominate: preference == .direct, now: now, &output)
        return output
    }

    /// Whether the selected path is a lower-priority one (ICE-TCP, relayed) that another may replace.
    public var onLowerPriorityPath: Bool { selectedAddress.map { lowerPriority[$0] != nil } ?? false }

    /// Remote addresses whose checks were answered (controlling side), the selected one among them.
    private var answered: Set<SocketAddress> = []

    /// Whether a check to `address` was answered: a path that worked, selected or left for a better one.
    public func hasAnswered(_ address: SocketAddress) -> Bool { !answered.isEmpty && answered.contains(address) }

    /// How the selected path ranks (nil before one is).
    private var selectedPreference: CandidatePreference? { selectedAddress.map { lowerPriority[$0] ?? .direct } }

    /// Whether no check has been answered yet (still looking for a path): since the start, or
    /// (controlling side) since a restart, whose path from before may be gone with the network.
    public var isSearching: Bool {
        state == .checking && (selectedAddress == nil || (role == .controlling && restarted && answered.isEmpty))
    }

    /// The remote candidates checks go to.
    public var candidates: [SocketAddress] { remoteCandidates }

    private func setState(_ new: ICEState, _ output: inout ICEOutput) {
        guard state != new else { return }
        state = new
        output.state = new
    }

    private func sendCheck(to address: SocketAddress, nominate: Bool = true, now: Double, _ output: inout ICEOutput) {
        guard let remote else { return }
        let id = STUNMessage.randomTransactionID()
        var attributes: [STUNAttribute] = [
            .username("\(remote.ufrag):\(local.ufrag)"), .priority(ICEPriority.peerReflexive),
            .iceControlling(tieBreaker: tieBreaker),
        ]
        let nominating = role == .controlling && nominate
        if nominating { attributes.append(.useCandidateFlag) }
        let request = STUNMessage(messageClass: .request, transactionID: id, attributes: attributes)
        let bytes = request.serialized(integrityKey: Array(remote.pwd.utf8), fingerprint: true)
        transactions[id] = Transaction(bytes: bytes, to: address, nominating: nominating, sentAt: now, firstSentAt: now,
                                       nextRetransmit: now + timers.initialRetransmit, interval: timers.initialRetransmit)
        output.datagrams.append((bytes, address))
    }

    /// Handles a datagram that looked like STUN (RFC 7983), from `source`.
    public func receive(_ bytes: [UInt8], from source: SocketAddress, now: Double) -> ICEOutput {
        var output = ICEOutput()
        guard let message = try? STUNMessage(parsing: bytes), STUNMessage.verifyFingerprint(bytes) else { return output }
        switch message.messageClass {
        case .request: answer(message, bytes: bytes, from: source, now: now, &output)
        case .successResponse: handleSuccess(message, bytes: bytes, from: source, now: now, &output)
        case .errorResponse: handleError(message, bytes: bytes, now: now, &output)
        case .indication: break
        }
        return output
    }

    private func answer(_ request: STUNMessage, bytes: [UInt8], from source: SocketAddress, now: Double,
                        _ output: inout ICEOutput) {
        let key = Array(local.pwd.utf8)
        func reply(_ attributes: [STUNAttribute], error: Bool) {
            let response = STUNMessage(messageClass: error ? .errorResponse : .successResponse,
                                       transactionID: request.transactionID, attributes: attributes)
            output.datagrams.append((response.serialized(integrityKey: error ? nil : key, fingerprint: true), source))
        }
        guard let username = request.username, username.hasPrefix(local.ufrag + ":") else {
            reply([.errorCode(400, reason: "Bad Request")], error: true)
            return
        }
        guard STUNMessage.verifyIntegrity(bytes, key: key) else {
            reply([.errorCode(401, reason: "Unauthorized")], error: true)
            return
        }
        guard let mapped = STUNAddress(source) else { return }
        reply([.xorMappedAddress(mapped, transactionID: request.transactionID)], error: false)
        // A valid check is consent from the peer.
        lastConsent = now
        if role == .lite {
            // ICE-lite follows the controlling agent: the nominating check's source is where media goes,
            // and a later one from a new port (the client moved) moves the session with it.
            if request.hasUseCandidate || selectedAddress == nil, selectedAddress != source {
                selectedAddress = source
                output.selectedAddress = source
            }
            if request.hasUseCandidate { setState(.connected, &output) }
        }
    }

    private func handleSuccess(_ response: STUNMessage, bytes: [UInt8], from source: SocketAddress, now: Double,
                               _ output: inout ICEOutput) {
        guard let transaction = transactions[response.transactionID], let remote else { return }
        guard STUNMessage.verifyIntegrity(bytes, key: Array(remote.pwd.utf8)) else { return }
        transactions[response.transactionID] = nil
        answered.insert(transaction.to)
        roundTripTime = now - transaction.sentAt
        lastConsent = now
        nextConsentCheck = now + timers.consentInterval
        let preference = lowerPriority[transaction.to] ?? .direct
        let better = selectedPreference.map { preference < $0 } ?? true
        if preference != .direct, !transaction.nominating {
            // A lower-priority path answered. It is taken only while nothing better has answered,
            // and then nominated at once; the checks to the other candidates go on, so a better
            // path that answers later still wins.
            guard selectedAddress == nil || state != .connected || better else { return setState(.connected, &output) }
            select(transaction.to, response, now: now, &output)
            sendCheck(to: transaction.to, nominate: true, now: now, &output)
        } else if selectedAddress == nil || state != .connected || better {
            select(transaction.to, response, now: now, &output)
            // The checks to the other candidates stop, and the chosen pair is nominated once more
            // shortly: an ICE-lite peer follows the latest nomination, and a check to another of its
            // candidates still in flight must not be the last one it sees.
            transactions = transactions.filter { $0.value.to == transaction.to }
            nextConsentCheck = now + 0.2
        }
        setState(.connected, &output)
    }

    private func select(_ address: SocketAddress, _ response: STUNMessage, now: Double, _ output: inout ICEOutput) {
        selectedAddress = address
        mappedAddress = response.xorMappedAddress.flatMap { try? SocketAddress(stun: $0) }.map(DualStack.unmapped)
        output.selectedAddress = address
        nextConsentCheck = now + 0.2
    }

    private func handleError(_ response: STUNMessage, bytes: [UInt8], now: Double, _ output: inout ICEOutput) {
        guard transactions[response.transactionID] != nil else { return }
        // After a restart the peer may not have taken the new credentials yet (its answer crosses
        // our first checks): keep retransmitting until it has, or until the connect timeout.
        guard !restarted else { return }
        transactions[response.transactionID] = nil
        if let (code, reason) = response.errorCode, state == .checking {
            setState(.failed(reason: "check rejected: \(code) \(reason)"), &output)
        }
    }

    /// When ``handleTimers(now:)`` should run next.
    /// Read after every datagram a session receives: a running minimum, no array.
    public var nextTimer: Double? {
        var next: Double?
        func consider(_ time: Double) { next = min(next ?? time, time) }
        for transaction in transactions.values { consider(transaction.nextRetransmit) }
        if let nextConsentCheck { consider(nextConsentCheck) }
        if state == .checking, let startedAt { consider(startedAt + timers.connectTimeout) }
        if let lastConsent, state == .connected || isDisconnected {
            consider(lastConsent + (isDisconnected ? timers.consentTimeout : timers.disconnectAfter))
        }
        return next
    }

    private var isDisconnected: Bool {
        if case .disconnected = state { return true }
        return false
    }

    /// Retransmits checks, sends consent checks, and fails or disconnects on silence.
    public func handleTimers(now: Double) -> ICEOutput {
        var output = ICEOutput()
        switch state {
        case .failed, .closed, .new: return output
        default: break
        }
        if state == .checking, let startedAt, now - startedAt >= timers.connectTimeout {
            transactions.removeAll()
            setState(.failed(reason: "no STUN answer within \(timers.connectTimeout) s"), &output)
            return output
        }
        for (id, var transaction) in transactions where transaction.nextRetransmit <= now {
            if now - transaction.firstSentAt > timers.connectTimeout {
                transactions[id] = nil
                continue
            }
            transaction.interval = min(transaction.interval * 2, timers.maxRetransmit)
            transaction.nextRetransmit = now + transaction.interval
            transaction.sentAt = now
            transactions[id] = transaction
            output.datagrams.append((transaction.bytes, transaction.to))
        }
        if role == .controlling, let nextConsentCheck, now >= nextConsentCheck, let selectedAddress {
            self.nextConsentCheck = now + timers.consentInterval
            sendCheck(to: selectedAddress, nominate: true, now: now, &output)
        }
        if let lastConsent, state == .connected || isDisconnected {
            let silence = now - lastConsent
            if silence >= timers.consentTimeout {
                setState(.failed(reason: "consent expired: no answer for \(Int(silence)) s"), &output)
            } else if silence >= timers.disconnectAfter, state == .connected {
                setState(.disconnected(reason: "no consent answer for \(Int(silence)) s"), &output)
            }
        }
        if isDisconnected, let lastConsent, now - lastConsent < timers.disconnectAfter {
            setState(.connected, &output)
        }
        return output
    }

    /// Stops all checks.
    public func close() {
        transactions.removeAll()
        nextConsentCheck = nil
        state = .closed
    }
}
