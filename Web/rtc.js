// rtc.js: a small browser SDK for the Swift RTC server's signaling protocol (docs/protocol.md),
// and the one module apps import. Plain ES modules, no build step, no dependencies; each part is a
// module of its own (docs/web.md): signal-client.js, transports.js, publisher.js, subscriber.js,
// participants.js, data.js, stats.js, capture.js, rejoin.js, share.js, client.js (RTCClient, tying
// them together).
//
//   const client = new RTCClient();
//   client.addEventListener("track", (e) => attach(e.detail));      // {uid, source, kind, track, stream, trackSid, ...}
//   await client.join({channel: "demo", uid: "2001", token});        // resolves with the `joined` payload
//   await client.publishCamera({audio: true, video: {width: 640, height: 360}});
//   const share = await RTCClient.shareScreen({channel: "demo", hostUid: "1001", token: subToken});
//   client.addEventListener("data", (e) => show(e.detail));          // {uid, topic, text, payload, reliable, stream}
//   await client.publishData("hello", {topic: "chat"});              // to everyone; {destinations: ["2001"]} to some

export {RTCClient} from "./client.js";
export {RTCError} from "./errors.js";
export {PROTOCOL_VERSION, PROTOCOL_VERSION_OBJECT, SDK_NAME, SDK_VERSION, defaultSignalingURL} from "./signal-client.js";
export {parseSections} from "./transports.js";
export {requireCaptureContext} from "./capture.js";
export {DEFAULT_SCREEN_SHARE_SUFFIX, screenShareUID, isScreenShareUID, screenShareHost} from "./screen-share-uid.js";
