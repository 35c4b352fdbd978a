// The screen-share user is built on the engine; apps that import it get RTCCore's types too, and
// the capture side (sources, the host link, the frame ring) that the relay sharer uses alone.
@_exported import RTCCore
@_exported import ScreenCapture
