// The screen-share uid convention (`ScreenShareUID`, `isScreenShareUID`) lives in RTCConventions,
// a target without dependencies that the server shares; RTCMedia users see it as before.
@_exported import RTCConventions
