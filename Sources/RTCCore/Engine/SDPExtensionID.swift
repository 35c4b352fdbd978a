/// The header extension ids of ``SDPCodecs/extensions``, by name.
enum SDPExtensionID {
    static let audioLevel: UInt8 = 1
    static let absSendTime: UInt8 = 2
    static let transportWideSequence: UInt8 = 3
    static let mid: UInt8 = 4
    static let videoOrientation: UInt8 = 5
}
