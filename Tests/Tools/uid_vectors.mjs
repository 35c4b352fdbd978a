// Checks Web/screen-share-uid.js against Tests/Fixtures/screen-share-uids.json, the table Swift's
// ScreenShareUID is checked against too (ScreenShareUIDTests). Prints one JSON line: {ok, checked, failures}.
import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const {isScreenShareUID, screenShareHost, screenShareUID} = await import(join(root, "Web", "screen-share-uid.js"));
const table = JSON.parse(readFileSync(join(root, "Tests", "Fixtures", "screen-share-uids.json"), "utf8"));
const failures = [];
for (const c of table.cases) {
  const got = {isShare: isScreenShareUID(c.uid, c.suffix), host: screenShareHost(c.uid, c.suffix), sharer: screenShareUID(c.uid, c.suffix)};
  if (got.isShare !== c.isShare || got.host !== c.host || got.sharer !== c.sharer) failures.push({case: c, got});
}
console.log(JSON.stringify({ok: failures.length === 0, checked: table.cases.length, failures}));
