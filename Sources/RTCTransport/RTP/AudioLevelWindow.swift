import Foundation

/// RFC 6464 audio levels over a window (the `ssrc-audio-level` byte of each packet): the mean
/// linear amplitude and how many packets said voice. One rule for the server's active speakers and
/// the engine's volume indication. Recording is a table lookup: no allocation on a packet path.
public struct AudioLevelWindow: Sendable, Hashable {
    public private(set) var amplitudeSum = 0.0
    public private(set) var packets = 0
    public private(set) var voiced = 0

    public init() {}

    /// 10^(-level/20) for each level (0 to 127 -dBov), computed once.
    static let amplitudes: [Double] = (0..<128).map { pow(10, -Double($0) / 20) }

    /// One packet's extension byte: the V bit, then the level.
    public mutating func record(_ byte: UInt8) {
        amplitudeSum += Self.amplitudes[Int(byte & 0x7f)]
        packets += 1
        if byte & 0x80 != 0 { voiced += 1 }
    }

    /// The mean linear amplitude (0 silence, 1 full scale); 0 without packets.
    public var meanAmplitude: Double { packets > 0 ? amplitudeSum / Double(packets) : 0 }

    /// Whether at least half the packets said voice.
    public var mostlyVoiced: Bool { packets > 0 && voiced * 2 >= packets }

    /// The level as Agora's volume indication gives it: 0 (silence, -127 dBov) to 255 (0 dBov),
    /// linear in dB.
    public var volume: Int {
        let amplitude = meanAmplitude
        guard amplitude > 0 else { return 0 }
        let dbov = max(-127, min(0, 20 * log10(amplitude)))
        return Int((255 * (1 + dbov / 127)).rounded())
    }
}
