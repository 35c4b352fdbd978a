// Publishing helpers: negotiations in order, and transceivers of unpublished tracks reused.
import {test, assert, assertEqual, rejection, sleep} from "./harness.js";
import {SerialQueue, sendTransceiver} from "../../Web/publisher.js";

test("publisher: the queue runs jobs one at a time, in order, and a failure stays its own job's", async () => {
  const queue = new SerialQueue();
  /** @type {string[]} */
  const log = [];
  const first = queue.run(async () => { log.push("1 start"); await sleep(20); log.push("1 end"); return 1; });
  const second = queue.run(async () => { log.push("2"); throw new Error("two failed"); });
  const third = queue.run(async () => { log.push("3"); return 3; });
  assertEqual(await first, 1);
  assertEqual((await rejection(second)).message, "two failed");
  assertEqual(await third, 3);
  assertEqual(log, ["1 start", "1 end", "2", "3"]);
});

test("publisher: a new track gets a sendonly transceiver; one of its kind left spare is reused", async () => {
  const pc = new RTCPeerConnection();
  try {
    const canvas = document.createElement("canvas");
    const [first, second] = [canvas.captureStream(1).getVideoTracks()[0], canvas.captureStream(1).getVideoTracks()[0]];
    const options = {preferCodecs: true, log: () => {}};
    const transceiver = await sendTransceiver(pc, [], first, null, options);
    assertEqual([transceiver.direction, transceiver.sender.track === first], ["sendonly", true]);
    transceiver.direction = "inactive";
    const audio = pc.addTransceiver("audio", {direction: "inactive"});
    const spare = [audio, transceiver];
    const reused = await sendTransceiver(pc, spare, second, null, options);
    assert(reused === transceiver, "the spare video transceiver, not the audio one");
    assertEqual([reused.direction, reused.sender.track === second, spare.length, pc.getTransceivers().length], ["sendonly", true, 1, 2]);
  } finally {
    pc.close();
  }
});
