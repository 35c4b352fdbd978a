// The screen-share uid rule (docs/screen-share.md): the sharer of host `1001` joins as `1001_sub`
// under the standard suffix. The same rule as Swift's `ScreenShareUID`; both are checked against
// Tests/Fixtures/screen-share-uids.json (ScreenShareUIDTests, Tests/Tools/uid_vectors.mjs).

/** The suffix this SDK uses unless the server says another. */
export const DEFAULT_SCREEN_SHARE_SUFFIX = "_sub";

/**
 * Whether `uid` names a screen share: `<host><suffix>` with a non-empty host (an empty suffix marks none).
 * @param {string} uid
 * @param {string} [suffix]
 * @returns {boolean}
 */
export function isScreenShareUID(uid, suffix = DEFAULT_SCREEN_SHARE_SUFFIX) {
  return suffix !== "" && uid.length > suffix.length && uid.endsWith(suffix);
}

/**
 * The host of a screen-share uid, or null when `uid` is not one.
 * @param {string} uid
 * @param {string} [suffix]
 * @returns {string | null}
 */
export function screenShareHost(uid, suffix = DEFAULT_SCREEN_SHARE_SUFFIX) {
  return isScreenShareUID(uid, suffix) ? uid.slice(0, uid.length - suffix.length) : null;
}

/**
 * The uid a host's screen share joins as; a screen-share uid is its own.
 * @param {string} hostUid
 * @param {string} [suffix]
 * @returns {string}
 */
export function screenShareUID(hostUid, suffix = DEFAULT_SCREEN_SHARE_SUFFIX) {
  return isScreenShareUID(hostUid, suffix) ? hostUid : hostUid + suffix;
}
