// Transports: SDP sections, ICE servers, and the two peer connections negotiating for real in
// this browser (a local RTCPeerConnection plays the server).
import {test, assert, assertEqual} from "./harness.js";
import {parseSections, sectionSends, iceServersFrom, Transports} from "../../Web/transports.js";

test("transports: sections by mid with kind, direction and a=msid", () => {
  const sdp = ["v=0", "m=audio 9 RTP/AVP 111", "a=mid:0", "a=recvonly", "m=video 9 RTP/AVP 96", "a=mid:v", "a=msid:PA_1 TR_2",
               "a=sendonly", "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=mid:2", ""].join("\n");
  assertEqual(parseSections(sdp), {
    "0": {kind: "audio", direction: "recvonly", streamID: null, trackID: null, mid: "0"},
    v: {kind: "video", direction: "sendonly", streamID: "PA_1", trackID: "TR_2", mid: "v"},
    "2": {kind: "application", direction: "sendrecv", streamID: null, trackID: null, mid: "2"},
  });
  const sections = parseSections(sdp);
  assertEqual([sectionSends(sections.v, "TR_2"), sectionSends(sections.v, "TR_3"), sectionSends(sections["0"], "TR_2"),
               sectionSends(undefined, "TR_2")], [true, false, false, false]);
});

test("transports: the joined ICE servers without null fields", () => {
  assertEqual(iceServersFrom([{urls: "stun:a", username: null, credential: null}, {urls: ["turn:b"], username: "u", credential: "p"}]),
              [{urls: "stun:a"}, {urls: ["turn:b"], username: "u", credential: "p"}]);
  assertEqual(iceServersFrom(), []);
});

test("transports: a subscriber answers an offer and a publisher applies an answer", async () => {
  /** @type {string[]} */
  const states = [];
  const transports = new Transports({onStateChange: (transport, state) => states.push(`${transport} ${state}`)});
  const server = new RTCPeerConnection();
  try {
    server.addTransceiver("video", {direction: "sendonly"});
    const offer = await server.createOffer();
    await server.setLocalDescription(offer);
    const answer = await transports.answerSubscriberOffer(/** @type {string} */ (offer.sdp));
    assert(/a=recvonly/.test(answer), "the subscriber answers recvonly");
    await server.setRemoteDescription({type: "answer", sdp: answer});
    const pc = transports.publisherPC();
    pc.addTransceiver("audio", {direction: "sendonly"});
    const publisherOffer = await transports.createPublisherOffer();
    const peer = new RTCPeerConnection();
    await peer.setRemoteDescription({type: "offer", sdp: publisherOffer});
    const publisherAnswer = await peer.createAnswer();
    await transports.applyPublisherAnswer(/** @type {string} */ (publisherAnswer.sdp));
    assertEqual(pc.signalingState, "stable");
    peer.close();
    assert(transports.publisher === pc && transports.subscriber !== null, "one connection each, kept");
  } finally {
    server.close();
    transports.close();
  }
  assertEqual([transports.publisher, transports.subscriber], [null, null]);
});
