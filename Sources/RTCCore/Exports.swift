// Frames, files, conversion and media threads live in RTCMedia (which has no codecs and no
// network, so the relay screen sharer can use them alone); RTCCore users see them as before.
@_exported import RTCMedia
// End-to-end encryption's key provider and frame cryptor (RTCEngineConfiguration.encryption).
@_exported import RTCE2EE
