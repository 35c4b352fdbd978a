// capture.js: camera, microphone and screen capture, which browsers give only to secure contexts
// (https://, or http://localhost): a page served over plain http from another host can watch but
// not publish, and says so.

import {RTCError} from "./errors.js";

/**
 * Throws an RTCError (code 0) saying why `navigator.mediaDevices[what]` is not there.
 * @param {"getUserMedia" | "getDisplayMedia"} what
 */
export function requireCaptureContext(what) {
  if (navigator.mediaDevices && navigator.mediaDevices[what]) return;
  const reason = window.isSecureContext === false
    ? `${what} needs a secure context: open the page over https (rtc-cli server --tls-cert/--tls-key) or from localhost; `
      + `${location.origin} can watch but not publish`
    : `${what} is not available in this browser`;
  throw new RTCError(0, reason);
}

/**
 * getDisplayMedia with a size and rate wanted (the capture is scaled down to fit, never up).
 * @param {{video?: {width: number, height: number, frameRate?: number}, audio?: boolean}} options
 * @returns {Promise<MediaStream>}
 */
export function captureScreen({video = {width: 1280, height: 720, frameRate: 15}, audio = false} = {}) {
  try {
    requireCaptureContext("getDisplayMedia");
  } catch (error) {
    return Promise.reject(error);
  }
  return navigator.mediaDevices.getDisplayMedia({
    video: {width: {max: video.width, ideal: video.width}, height: {max: video.height, ideal: video.height},
            frameRate: {ideal: video.frameRate || 15}},
    audio: !!audio,
  });
}

/**
 * getUserMedia for the camera and microphone.
 * @param {{audio?: boolean | MediaTrackConstraints, video?: boolean | {width?: number, height?: number, frameRate?: number}}} options
 * @returns {Promise<MediaStream>}
 */
export function captureCamera({audio = true, video = true}) {
  requireCaptureContext("getUserMedia");
  return navigator.mediaDevices.getUserMedia({
    audio: !!audio && (audio === true ? {echoCancellation: true} : audio),
    video: !!video && (video === true ? {} : {width: {ideal: video.width}, height: {ideal: video.height},
                                                frameRate: video.frameRate ? {ideal: video.frameRate} : undefined}),
  });
}
