// The screen-share user is built on the engine; apps that import it get RTCCore's types too.
@_exported import RTCCore
