// share.js: sharing a screen as the host's auxiliary user, `<hostUid><suffix>` (`1001_sub`), on a
// connection of its own, as the engine does: role broadcaster, subscribed to nothing, one `screen`
// track. `RTCClient.shareScreen` (client.js) calls it with a maker of RTCClients; tests pass fakes.

import {captureScreen} from "./capture.js";
import {DEFAULT_SCREEN_SHARE_SUFFIX, screenShareUID} from "./screen-share-uid.js";

/**
 * @typedef {(...args: unknown[]) => void} Logger
 * @typedef {import("./client.js").JoinOptions} JoinOptions
 * @typedef {import("./client.js").ClientOptions} ClientOptions
 * @typedef {{video?: {width: number, height: number, frameRate?: number}, audio?: boolean}} CaptureOptions
 * @typedef {{url?: string | null, fallbackURLs?: string[], channel: string, hostUid: string, token: string, suffix?: string,
 *            video?: {width: number, height: number, frameRate?: number}, audio?: boolean, stream?: MediaStream | null,
 *            maxBitrateKbps?: number, log?: Logger | null, clientOptions?: ClientOptions}} ShareOptions
 * @typedef {{join: (options: JoinOptions) => Promise<unknown>,
 *            publishScreen: (options: {stream: MediaStream, maxBitrateKbps: number}) => Promise<unknown>,
 *            leave: () => Promise<void>}} ShareClient
 *   What sharing needs of a client (RTCClient has it).
 */

/**
 * Shares a screen as `<hostUid><suffix>`. Captures first (a browser wants the user gesture for
 * getDisplayMedia) unless given `stream`, then joins with a client of its own and publishes. A
 * failure leaves, stops a capture of its own (never a given stream) and rejects. The user stopping
 * the share in the browser's UI (the video track ends) leaves. Resolves with the client.
 * @template {ShareClient} C
 * @param {(options: ClientOptions) => C} makeClient
 * @param {ShareOptions} options
 * @param {(options: CaptureOptions) => Promise<MediaStream>} [capture] getDisplayMedia by default
 * @returns {Promise<C>}
 */
export async function shareScreen(makeClient, {url = null, fallbackURLs = [], channel, hostUid, token,
                                               suffix = DEFAULT_SCREEN_SHARE_SUFFIX, video = {width: 1280, height: 720, frameRate: 15},
                                               audio = false, stream = null, maxBitrateKbps = 1500, log = null, clientOptions = {}},
                                  capture = captureScreen) {
  const media = stream || await capture({video, audio});
  const client = makeClient({log, ...clientOptions});
  try {
    await client.join({url, fallbackURLs, channel, uid: screenShareUID(hostUid, suffix), token, role: "broadcaster",
                       autoSubscribe: false, autoSubscribeAudio: false, autoSubscribeVideo: false});
    await client.publishScreen({stream: media, maxBitrateKbps});
  } catch (error) {
    if (!stream) for (const track of media.getTracks()) track.stop();
    await client.leave();
    throw error;
  }
  // The user stopping the share in the browser's UI ends it.
  for (const track of media.getVideoTracks()) track.addEventListener("ended", () => client.leave());
  return client;
}
