import Foundation
import LiveKitProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import TLSStream
import Signaling

/// Webhooks as LiveKit sends them (docs/server-api.md): each ``RoomEvent`` is POSTed to every
/// `--webhook-url` as LiveKit's `WebhookEvent` in protobuf JSON (`application/webhook+json`), with
/// an `Authorization` JWT signed by the API key's secret whose `sha256` claim is the body's digest
/// (LiveKit's `WebhookReceiver` checks both).
///
/// Each URL has its own queue, sent in order one at a time on an event loop of its own: a receiver
/// that fails or never answers is retried with backoff (0.5 s doubling to 30 s), and meanwhile at
/// most `queueLimit` events wait (``ServerConfiguration/webhookQueueLimit``); later ones are dropped and counted. Media and signaling never
/// wait on it: an event is encoded and queued where it happens, in a few microseconds.
final class WebhookNotifier: Sendable {
    static let attemptTimeout = TimeAmount.seconds(5)

    struct Counters: Sendable {
        var delivered = 0
        var failedAttempts = 0
        var dropped = 0
        var queued = 0
    }

    private let deliverers: [Deliverer]
    private let apiKey: String
    private let secret: String

    /// Nil when there is no URL. Throws for a URL that is not http(s).
    init?(urls: [String], apiKey: String, secret: String, queueLimit: Int = 1000, group: EventLoopGroup, logger: Logger) throws {
        guard !urls.isEmpty else { return nil }
        let tls = try TLSContext.client()
        deliverers = try urls.map { url in
            Deliverer(target: try HTTPPost.target(url), loop: group.next(), tls: tls, queueLimit: queueLimit, logger: logger)
        }
        self.apiKey = apiKey
        self.secret = secret
    }

    /// Queues `event` for every URL (on the caller's thread: the room's SFU loop).
    func post(_ event: RoomEvent) {
        let body = Array(Self.json(event, id: "EV_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12),
                                   now: Int64(Date().timeIntervalSince1970)).utf8)
        var claims = WebhookClaims(iss: apiKey, nbf: 0, exp: 0, sha256: Data(SHA256Digest.digest(body)).base64EncodedString())
        let now = Int64(Date().timeIntervalSince1970)
        claims.nbf = now - 5
        claims.exp = now + 300
        let token = JWT.sign(claims, secret: secret)
        for deliverer in deliverers { deliverer.enqueue(body: body, token: token) }
    }

    var counters: Counters {
        deliverers.reduce(into: Counters()) { sum, deliverer in
            let own = deliverer.counters
            sum.delivered += own.delivered
            sum.failedAttempts += own.failedAttempts
            sum.dropped += own.dropped
            sum.queued += own.queued
        }
    }

    /// The `/metrics` lines.
    var prometheus: String {
        let counters = self.counters
        return """
        # HELP rtc_webhook_events_delivered_total Webhook events a receiver answered with 2xx.
        # TYPE rtc_webhook_events_delivered_total counter
        rtc_webhook_events_delivered_total \(counters.delivered)
        # HELP rtc_webhook_attempts_failed_total Webhook POSTs that failed (no connection, no answer, not 2xx); each is retried.
        # TYPE rtc_webhook_attempts_failed_total counter
        rtc_webhook_attempts_failed_total \(counters.failedAttempts)
        # HELP rtc_webhook_events_dropped_total Webhook events dropped because their receiver's queue was full.
        # TYPE rtc_webhook_events_dropped_total counter
        rtc_webhook_events_dropped_total \(counters.dropped)
        # HELP rtc_webhook_events_queued Webhook events waiting for their receiver.
        # TYPE rtc_webhook_events_queued gauge
        rtc_webhook_events_queued \(counters.queued)

        """
    }

    /// The event as LiveKit's `WebhookEvent` in protobuf JSON.
    static func json(_ event: RoomEvent, id: String, now: Int64) -> String {
        var message = LKWebhookEvent()
        message.event = event.name
        message.id = id
        message.createdAt = now
        message.room = RoomServiceMapping.room(event.room)
        switch event {
        case .roomStarted, .roomFinished: break
        case .participantJoined(_, let participant):
            message.participant = RoomServiceMapping.participant(participant)
        case .participantLeft(_, let participant, let reason):
            message.participant = RoomServiceMapping.participant(participant)
            message.participant.state = .disconnected
            message.participant.disconnectReason = LiveKitMapping.reason(reason)
        case .trackPublished(_, let participant, let track), .trackUnpublished(_, let participant, let track):
            message.participant = RoomServiceMapping.participant(participant)
            message.track = LiveKitMapping.track(track)
        }
        return (try? message.jsonString()) ?? "{}"
    }

    private struct WebhookClaims: Encodable {
        var iss: String
        var nbf: Int64
        var exp: Int64
        var sha256: String
    }

    /// One URL's queue and its sender.
    private final class Deliverer: Sendable {
        private struct State {
            var queue: [(body: [UInt8], token: String)] = []
            var sending = false
            var backoffMs = 0
            var counters = Counters()
        }

        private let target: HTTPPost.Target
        private let loop: EventLoop
        private let tls: TLSContext
        private let logger: Logger
        private let state = NIOLockedValueBox(State())
        private let queueLimit: Int

        init(target: HTTPPost.Target, loop: EventLoop, tls: TLSContext, queueLimit: Int, logger: Logger) {
            self.queueLimit = queueLimit
            self.target = target
            self.loop = loop
            self.tls = tls
            self.logger = logger
        }

        var counters: Counters {
            state.withLockedValue { state in
                var counters = state.counters
                counters.queued = state.queue.count
                return counters
            }
        }

        func enqueue(body: [UInt8], token: String) {
            let start = state.withLockedValue { state -> Bool in
                guard state.queue.count < self.queueLimit else {
                    state.counters.dropped += 1
                    return false
                }
                state.queue.append((body, token))
                guard !state.sending else { return false }
                state.sending = true
                return true
            }
            if start { loop.execute { self.sendNext() } }
        }

        /// Sends the head of the queue; on success the next, on failure the same again after the backoff.
        private func sendNext() {
            guard let next = state.withLockedValue({ state -> (body: [UInt8], token: String)? in
                guard let head = state.queue.first else {
                    state.sending = false
                    return nil
                }
                return head
            }) else { return }
            let headers = [("Content-Type", "application/webhook+json"), ("Authorization", next.token)]
            HTTPPost.send(target, headers: headers, body: next.body, on: loop, tls: tls, timeout: WebhookNotifier.attemptTimeout)
                .whenComplete { result in
                    let status = try? result.get().status
                    let delivered = status.map { (200..<300).contains($0) } ?? false
                    let delayMs = self.state.withLockedValue { state -> Int in
                        if delivered {
                            state.queue.removeFirst()
                            state.counters.delivered += 1
                            state.backoffMs = 0
                        } else {
                            state.counters.failedAttempts += 1
                            state.backoffMs = min(30_000, max(500, state.backoffMs * 2))
                        }
                        return state.backoffMs
                    }
                    if !delivered {
                        let reason = switch result {
                        case .success(let response): "HTTP \(response.status)"
                        case .failure(let error): "\(error)"
                        }
                        self.logger.notice("webhook not delivered", metadata: ["url": "\(self.target)", "reason": "\(reason)",
                                                                              "retryInMs": "\(delayMs)"])
                    }
                    if delayMs == 0 { self.sendNext() } else { self.loop.scheduleTask(in: .milliseconds(Int64(delayMs))) { self.sendNext() } }
                }
        }
    }
}
