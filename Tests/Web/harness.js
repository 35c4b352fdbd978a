// harness.js: the unit tests' runner, small on purpose. `test(name, fn)` registers a test (fn may
// be async); `run()` runs them in order, each with a time limit, and leaves the report in
// `window.unitReport` ({done, passed, failed, tests: [{name, ok, error, ms}]}) and on the page,
// where Tests/Tools/web_unit.py reads it.

/** @typedef {{name: string, ok: boolean, error: string | null, ms: number}} TestResult */

/** @type {{name: string, fn: () => unknown}[]} */
const registered = [];

/**
 * @param {string} name
 * @param {() => unknown} fn
 */
export function test(name, fn) { registered.push({name, fn}); }

/**
 * @param {unknown} condition
 * @param {string} [message]
 * @returns {asserts condition}
 */
export function assert(condition, message = "assertion failed") {
  if (!condition) throw new Error(message);
}

/**
 * Deep equality through JSON (the values tests compare are plain data).
 * @param {unknown} actual
 * @param {unknown} expected
 * @param {string} [message]
 */
export function assertEqual(actual, expected, message = "") {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${message ? message + ": " : ""}expected ${e}, got ${a}`);
}

/**
 * Awaits `promise` and returns what it rejected with; throws if it resolved.
 * @param {Promise<unknown>} promise
 * @returns {Promise<any>}
 */
export async function rejection(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection, got a value");
}

/**
 * Waits `ms` milliseconds.
 * @param {number} ms
 */
export function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

/**
 * Runs every registered test, one at a time, each within `timeoutMs`.
 * @param {{timeoutMs?: number, loadErrors?: string[]}} options
 */
export async function run({timeoutMs = 5000, loadErrors = []} = {}) {
  /** @type {TestResult[]} */
  const results = loadErrors.map((error) => ({name: "load", ok: false, error, ms: 0}));
  for (const {name, fn} of registered) {
    const started = performance.now();
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    const limit = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs); });
    try {
      await Promise.race([Promise.resolve().then(fn), limit]);
      results.push({name, ok: true, error: null, ms: Math.round(performance.now() - started)});
    } catch (error) {
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      results.push({name, ok: false, error: text, ms: Math.round(performance.now() - started)});
    } finally {
      clearTimeout(timer);
    }
  }
  const failed = results.filter((r) => !r.ok).length;
  const report = {done: true, passed: results.length - failed, failed, tests: results};
  /** @type {any} */ (window).unitReport = report;
  const out = document.getElementById("report");
  if (out) out.textContent = JSON.stringify(report, null, 1);
  return report;
}
