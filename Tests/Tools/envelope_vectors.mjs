// Checks Web/data-envelope.js against Tests/Fixtures/data-envelopes.json, the table the Swift
// DataEnvelope is checked against too (DataChannelTests). Prints one JSON line: {ok, checked, failures}.
import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const {encodeEnvelope, decodeEnvelope, EnvelopeError} = await import(join(root, "Web", "data-envelope.js"));
const table = JSON.parse(readFileSync(join(root, "Tests", "Fixtures", "data-envelopes.json"), "utf8"));
const hex = (bytes) => Buffer.from(bytes).toString("hex");
const failures = [];
let checked = 0;
for (const vector of table.valid) {
  const payload = Uint8Array.from(Buffer.from(vector.payloadHex, "hex"));
  const encoded = hex(encodeEnvelope({topic: vector.topic, destinations: vector.destinations, sender: vector.sender, stream: vector.stream, payload}));
  if (encoded !== vector.hex) failures.push({vector: vector.hex, encoded});
  const decoded = decodeEnvelope(Uint8Array.from(Buffer.from(vector.hex, "hex")));
  if (decoded.topic !== vector.topic || decoded.sender !== vector.sender || decoded.stream !== vector.stream
      || JSON.stringify(decoded.destinations) !== JSON.stringify(vector.destinations) || hex(decoded.payload) !== vector.payloadHex) {
    failures.push({vector: vector.hex, decoded: {...decoded, payload: hex(decoded.payload)}});
  }
  checked += 1;
}
for (const vector of table.invalid) {
  try {
    decodeEnvelope(Uint8Array.from(Buffer.from(vector.hex, "hex")));
    failures.push({vector: vector.hex, expected: vector.kind, got: "accepted"});
  } catch (error) {
    if (!(error instanceof EnvelopeError) || error.kind !== vector.kind) failures.push({vector: vector.hex, expected: vector.kind, got: error.kind || String(error)});
  }
  checked += 1;
}
console.log(JSON.stringify({ok: failures.length === 0, checked, failures}));
process.exit(failures.length === 0 ? 0 : 1);
