/// When a single stream configured with two temporal layers really encodes two.
///
/// Layering costs compression: base frames predict from two frames back, so each is larger than
/// it would be in one layer. With room to spare that cost buys what layering is for (the SFU can
/// halve the frame rate for a slow viewer at no cost to the others); on a narrow uplink it is a
/// loss for everyone, since the publisher's own rate is then what holds every viewer back. So the
/// layers are on while the estimate's target has headroom over what the encoder needs at this
/// size and rate, and off (one layer, every frame a base frame) while it has not:
///
/// - off as soon as the target falls under `offFactor` times the encoder's floor;
/// - on again once it has been at `onFactor` times the floor or more for `onAfterUs`.
///
/// No keyframe either way: the encoder changes its pattern at a base frame.
struct TemporalLayerPolicy: Sendable, Equatable {
    static let offFactor = 2
    static let onFactor = 3
    static let onAfterUs: Int64 = 4_000_000

    /// The configured number of layers (1 or 2).
    let maximum: Int
    /// ``SendSideCongestion/encoderFloorKbps(size:frameRate:)`` at the stream's size and rate.
    let floorKbps: Int
    private(set) var active: Int
    /// Since when the target has been high enough to turn layering on.
    private var headroomSinceUs: Int64?

    init(maximum: Int, floorKbps: Int) {
        self.maximum = maximum
        self.floorKbps = floorKbps
        active = maximum
    }

    /// The layers to encode under `targetKbps` (nil: no estimate yet, nothing changes).
    mutating func update(targetKbps: Int?, nowUs: Int64) -> Int {
        guard maximum > 1, let target = targetKbps else { return active }
        if target < Self.offFactor * floorKbps {
            active = 1
            headroomSinceUs = nil
        } else if active == 1 {
            if target >= Self.onFactor * floorKbps {
                let since = headroomSinceUs ?? nowUs
                headroomSinceUs = since
                if nowUs - since >= Self.onAfterUs {
                    active = maximum
                    headroomSinceUs = nil
                }
            } else {
                headroomSinceUs = nil
            }
        }
        return active
    }
}
