// The capture side speaks in RTCMedia's frames and sizes.
@_exported import RTCMedia
