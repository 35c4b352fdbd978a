import RTCMedia

/// How often the share may send frames.
public enum ScreenShareProfile: String, Sendable, Hashable, CaseIterable, Codable {
    /// 5 fps: static documents, weak networks.
    case low
    /// 15 fps.
    case `default`
    /// 30 fps: scrolling and video.
    case high

    public var framesPerSecond: Int {
        switch self {
        case .low: 5
        case .default: 15
        case .high: 30
        }
    }
}

/// The frame policy of a screen share (DESIGN.md §1.2): fit inside 1280x720 (or 720x1280 for a
/// portrait screen) keeping the aspect ratio with even sides, never stretched; cap the frame rate by
/// timestamp; re-send the last frame when the screen is idle for 300 ms; keep resolution under
/// pressure (drop frame rate) with the encoder in screen-content mode.
public struct ScreenSharePolicy: Sendable, Hashable, Codable {
    /// The landscape bound; a portrait frame fits the transposed one.
    public var maxWidth: Int
    public var maxHeight: Int
    public var framesPerSecond: Int
    /// Re-send the last frame after this long without a new one.
    public var idleResendMs: Int
    public var bitrateKbps: Int

    public init(profile: ScreenShareProfile = .default, maxWidth: Int = 1280, maxHeight: Int = 720, idleResendMs: Int = 300,
                bitrateKbps: Int = 1500) {
        self.maxWidth = maxWidth
        self.maxHeight = maxHeight
        framesPerSecond = profile.framesPerSecond
        self.idleResendMs = idleResendMs
        self.bitrateKbps = bitrateKbps
    }

    /// The size a `width` x `height` screen is sent at.
    public func fittedSize(width: Int, height: Int) -> VideoSize {
        let portrait = height > width
        let bounds = portrait ? VideoSize(width: min(maxWidth, maxHeight), height: max(maxWidth, maxHeight))
            : VideoSize(width: max(maxWidth, maxHeight), height: min(maxWidth, maxHeight))
        return VideoSize(width: width, height: height).fitted(into: bounds)
    }

}
