import RTCCore

extension ScreenSharePolicy {
    /// The engine settings that carry the policy: screen content, keep the resolution.
    public var encoderConfiguration: VideoEncoderConfiguration {
        VideoEncoderConfiguration(dimensions: VideoSize(width: max(maxWidth, maxHeight), height: min(maxWidth, maxHeight)),
                                  frameRate: framesPerSecond, bitrateKbps: bitrateKbps, orientationMode: .adaptive,
                                  degradationPreference: .maintainResolution, contentHint: .detail)
    }
}
