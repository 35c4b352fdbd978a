// The rules the Swift side and the web client share, checked against the same tables as Swift's
// tests (docs/testing.md): the screen-share uid, the rejoin backoff and the data envelope.
import {test, assert, assertEqual} from "./harness.js";
import {isScreenShareUID, screenShareHost, screenShareUID} from "../../Web/screen-share-uid.js";
import {RejoinBackoff} from "../../Web/rejoin-policy.js";
import {encodeEnvelope, decodeEnvelope, EnvelopeError} from "../../Web/data-envelope.js";

/**
 * A fixture table from Tests/Fixtures.
 * @param {string} name
 * @returns {Promise<any>}
 */
async function fixture(name) {
  const response = await fetch(`../Fixtures/${name}`, {cache: "no-store"});
  if (!response.ok) throw new Error(`Tests/Fixtures/${name}: ${response.status}`);
  return response.json();
}

/** @param {string} hex */
function bytes(hex) { return Uint8Array.from((hex.match(/../g) || []).map((pair) => parseInt(pair, 16))); }
/** @param {Uint8Array} data */
function hex(data) { return [...data].map((b) => b.toString(16).padStart(2, "0")).join(""); }

test("tables: screen-share uids (Tests/Fixtures/screen-share-uids.json)", async () => {
  const table = await fixture("screen-share-uids.json");
  assert(table.cases.length >= 10, `${table.cases.length} cases`);
  for (const c of table.cases) {
    const got = {isShare: isScreenShareUID(c.uid, c.suffix), host: screenShareHost(c.uid, c.suffix), sharer: screenShareUID(c.uid, c.suffix)};
    assertEqual(got, {isShare: c.isShare, host: c.host, sharer: c.sharer}, `${c.uid} with ${JSON.stringify(c.suffix)}`);
  }
});

test("tables: rejoin backoff (Tests/Fixtures/rejoin-policy.json)", async () => {
  const table = await fixture("rejoin-policy.json");
  assert(table.runs.length >= 3, `${table.runs.length} runs`);
  for (const run of table.runs) {
    const backoff = new RejoinBackoff();
    const waits = run.failures.map((/** @type {boolean} */ answered) => backoff.failed(answered));
    assertEqual([waits, backoff.unreachable], [run.waitsMs, run.unreachable], run.name);
  }
});

test("tables: data envelopes, valid ones both ways (Tests/Fixtures/data-envelopes.json)", async () => {
  const table = await fixture("data-envelopes.json");
  assert(table.valid.length >= 5, `${table.valid.length} valid vectors`);
  for (const v of table.valid) {
    const encoded = encodeEnvelope({topic: v.topic, destinations: v.destinations, sender: v.sender, stream: v.stream, payload: bytes(v.payloadHex)});
    assertEqual(hex(encoded), v.hex, "encoded");
    const decoded = decodeEnvelope(bytes(v.hex));
    assertEqual({...decoded, payload: hex(decoded.payload)},
                {topic: v.topic, destinations: v.destinations, sender: v.sender, stream: v.stream, payload: v.payloadHex}, "decoded");
  }
});

test("tables: data envelopes, invalid ones refused with the same kind as Swift's", async () => {
  const table = await fixture("data-envelopes.json");
  assert(table.invalid.length >= 7, `${table.invalid.length} invalid vectors`);
  for (const v of table.invalid) {
    let kind = "accepted";
    try {
      decodeEnvelope(bytes(v.hex));
    } catch (error) {
      assert(error instanceof EnvelopeError, `${v.hex}: an EnvelopeError, not ${error}`);
      kind = error.kind;
    }
    assertEqual(kind, v.kind, v.hex);
  }
});
