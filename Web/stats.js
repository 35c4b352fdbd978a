// stats.js: figures from WebRTC stats reports: per remote video (inbound-rtp) and per published
// track (outbound-rtp), with kbps and loss over the time since the previous reading of each.

/**
 * @typedef {{kbps: number, packetsLost: number, packetsReceived: number, lossPercent: number}} Rates
 * @typedef {{timestamp: number, type: string, [field: string]: any}} StatsEntry
 * @typedef {{uid: string | null, source: string | null, trackSid: string, kind: string, width: number, height: number,
 *            fps: number, framesDecoded?: number, framesDropped?: number, framesReceived?: number, nackCount?: number,
 *            pliCount?: number, jitter?: number, bytesReceived?: number} & Rates} InboundFigures
 *   A remote track's figures; the frame and retransmission counts only once it has inbound stats.
 */

/** The previous reading of each counter set, so that each reading gives rates over the interval. */
export class RateTracker {
  constructor() {
    /** @type {Map<string, {t: number, bytes: number, packets: number, lost: number}>} */
    this._previous = new Map();
  }

  /**
   * Rates for `key` from a stat's timestamp (ms) and counters. The first reading gives 0 kbps and
   * the loss since the start; later ones, over the time since the previous one.
   * @param {string} key
   * @param {{timestamp: number}} stat
   * @param {number} [bytes]
   * @param {number} [packets]
   * @param {number} [lost]
   * @returns {Rates}
   */
  rates(key, stat, bytes = 0, packets = 0, lost = 0) {
    const previous = this._previous.get(key);
    this._previous.set(key, {t: stat.timestamp, bytes, packets, lost});
    if (!previous || stat.timestamp <= previous.t) {
      const total = packets + Math.max(0, lost);
      return {kbps: 0, packetsLost: lost, packetsReceived: packets, lossPercent: total ? (100 * Math.max(0, lost)) / total : 0};
    }
    const seconds = (stat.timestamp - previous.t) / 1000;
    const dPackets = packets - previous.packets, dLost = Math.max(0, lost - previous.lost);
    return {kbps: (8 * (bytes - previous.bytes)) / 1000 / seconds, packetsLost: lost, packetsReceived: packets,
            lossPercent: dPackets + dLost > 0 ? (100 * dLost) / (dPackets + dLost) : 0};
  }
}

/**
 * The last entry of `type` in a report (of `kind`, when given).
 * @param {RTCStatsReport | Map<string, StatsEntry>} report
 * @param {string} type e.g. "inbound-rtp"
 * @param {string} [kind] "audio" or "video"
 * @returns {StatsEntry | null}
 */
export function findStat(report, type, kind) {
  /** @type {StatsEntry | null} */
  let found = null;
  report.forEach((/** @type {StatsEntry} */ s) => {
    if (s.type === type && (kind === undefined || (s.kind || s.mediaType) === kind)) found = s;
  });
  return found;
}

/**
 * A remote track's figures from its receiver's report.
 * @param {{uid: string | null, source: string | null, trackSid: string, kind: string}} remote
 * @param {RTCStatsReport | Map<string, StatsEntry>} report
 * @param {RateTracker} tracker
 * @returns {InboundFigures}
 */
export function inboundFigures(remote, report, tracker) {
  const inbound = findStat(report, "inbound-rtp", remote.kind);
  const base = {uid: remote.uid, source: remote.source, trackSid: remote.trackSid, kind: remote.kind};
  if (!inbound) return {...base, width: 0, height: 0, fps: 0, kbps: 0, lossPercent: 0, packetsLost: 0, packetsReceived: 0};
  return {...base, ...tracker.rates(`in:${remote.trackSid}`, inbound, inbound.bytesReceived, inbound.packetsReceived, inbound.packetsLost),
          width: inbound.frameWidth || 0, height: inbound.frameHeight || 0, fps: inbound.framesPerSecond || 0,
          framesDecoded: inbound.framesDecoded || 0, framesDropped: inbound.framesDropped || 0,
          framesReceived: inbound.framesReceived || 0, nackCount: inbound.nackCount || 0, pliCount: inbound.pliCount || 0,
          jitter: inbound.jitter || 0, bytesReceived: inbound.bytesReceived || 0};
}

/**
 * A published track's figures from its sender's report.
 * @param {{sid: string | null, kind: string, source: string, mid: string | null}} local
 * @param {RTCStatsReport | Map<string, StatsEntry>} report
 * @param {RateTracker} tracker
 */
export function outboundFigures(local, report, tracker) {
  const outbound = findStat(report, "outbound-rtp");
  const base = {sid: local.sid, kind: local.kind, source: local.source, mid: local.mid};
  if (!outbound) return {...base, bytesSent: 0, packetsSent: 0, framesSent: 0, framesEncoded: 0};
  const rates = tracker.rates(`out:${local.mid}`, outbound, outbound.bytesSent, outbound.packetsSent, 0);
  return {...base, kbps: rates.kbps, bytesSent: outbound.bytesSent || 0, packetsSent: outbound.packetsSent || 0,
          framesSent: outbound.framesSent || 0, framesEncoded: outbound.framesEncoded || 0,
          width: outbound.frameWidth || 0, height: outbound.frameHeight || 0, fps: outbound.framesPerSecond || 0,
          qualityLimitationReason: outbound.qualityLimitationReason || null};
}
