// Stats helpers: rates over the interval between readings, and the figures of fake reports.
import {test, assertEqual} from "./harness.js";
import {RateTracker, findStat, inboundFigures, outboundFigures} from "../../Web/stats.js";

test("stats: the first reading gives 0 kbps and loss since the start; later ones, over the interval", () => {
  const tracker = new RateTracker();
  assertEqual(tracker.rates("k", {timestamp: 1000}, 10000, 90, 10), {kbps: 0, packetsLost: 10, packetsReceived: 90, lossPercent: 10});
  // 1 s later: 125000 more bytes (1000 kbps), 95 more packets and 5 more lost (5 %).
  assertEqual(tracker.rates("k", {timestamp: 2000}, 135000, 185, 15), {kbps: 1000, packetsLost: 15, packetsReceived: 185, lossPercent: 5});
  // A reading that does not move forward in time gives no rate.
  assertEqual(tracker.rates("k", {timestamp: 2000}, 200000, 185, 15).kbps, 0);
  // Keys are separate.
  assertEqual(tracker.rates("other", {timestamp: 5000}, 1, 0, 0), {kbps: 0, packetsLost: 0, packetsReceived: 0, lossPercent: 0});
});

test("stats: inbound figures of a remote video, from its inbound-rtp of the kind", () => {
  /** @type {Map<string, any>} */
  const report = new Map([
    ["a", {type: "inbound-rtp", kind: "audio", timestamp: 1000, bytesReceived: 5}],
    ["v", {type: "inbound-rtp", kind: "video", timestamp: 1000, bytesReceived: 1000, packetsReceived: 10, packetsLost: 0,
           frameWidth: 640, frameHeight: 360, framesPerSecond: 15, framesDecoded: 30, nackCount: 2}],
  ]);
  const tracker = new RateTracker();
  const remote = {uid: "a", source: "camera", trackSid: "TR_1", kind: "video"};
  const figures = inboundFigures(remote, report, tracker);
  assertEqual([figures.width, figures.height, figures.fps, figures.framesDecoded, figures.nackCount, figures.kbps, figures.bytesReceived],
              [640, 360, 15, 30, 2, 0, 1000]);
  report.set("v", {...report.get("v"), timestamp: 3000, bytesReceived: 51000, packetsReceived: 60});
  assertEqual(inboundFigures(remote, report, tracker).kbps, 200);
  assertEqual(inboundFigures({...remote, kind: "video"}, new Map(), tracker),
              {uid: "a", source: "camera", trackSid: "TR_1", kind: "video", width: 0, height: 0, fps: 0, kbps: 0, lossPercent: 0,
               packetsLost: 0, packetsReceived: 0});
});

test("stats: outbound figures of a published track", () => {
  const report = new Map([["o", {type: "outbound-rtp", timestamp: 1000, bytesSent: 100, packetsSent: 3, framesSent: 2, framesEncoded: 2,
                                 frameWidth: 320, frameHeight: 180, qualityLimitationReason: "bandwidth"}]]);
  const figures = outboundFigures({sid: "TR_1", kind: "video", source: "camera", mid: "0"}, report, new RateTracker());
  assertEqual(figures, {sid: "TR_1", kind: "video", source: "camera", mid: "0", kbps: 0, bytesSent: 100, packetsSent: 3, framesSent: 2,
                        framesEncoded: 2, width: 320, height: 180, fps: 0, qualityLimitationReason: "bandwidth"});
  assertEqual(findStat(report, "inbound-rtp"), null);
});
