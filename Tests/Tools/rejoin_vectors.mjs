// Checks Web/rejoin-policy.js against Tests/Fixtures/rejoin-policy.json, the table Swift's
// RejoinBackoff is checked against too. Prints one JSON line: {ok, checked, failures}.
import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const {RejoinBackoff} = await import(join(root, "Web", "rejoin-policy.js"));
const table = JSON.parse(readFileSync(join(root, "Tests", "Fixtures", "rejoin-policy.json"), "utf8"));
const failures = [];
for (const run of table.runs) {
  const backoff = new RejoinBackoff();
  const waits = run.failures.map((answered) => backoff.failed(answered));
  if (JSON.stringify(waits) !== JSON.stringify(run.waitsMs) || backoff.unreachable !== run.unreachable) {
    failures.push({run: run.name, waits, unreachable: backoff.unreachable});
  }
}
console.log(JSON.stringify({ok: failures.length === 0, checked: table.runs.length, failures}));
