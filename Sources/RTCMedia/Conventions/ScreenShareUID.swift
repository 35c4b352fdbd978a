/// The uid convention of the screen-share auxiliary user: the sharer of host `1001` joins as `1001_sub`.
public enum ScreenShareUID {
    /// The suffix that marks a screen-share participant.
    public static let suffix = "_sub"

    /// The uid the screen sharer of `hostUID` joins with.
    public static func sharer(of hostUID: String) -> String { hostUID + suffix }

    /// True when `uid` names a screen-share participant (`<host>_sub` with a non-empty host).
    public static func isScreenShare(_ uid: String) -> Bool {
        uid.count > suffix.count && uid.hasSuffix(suffix)
    }

    /// The host uid of a screen-share uid, or nil when `uid` is not one.
    public static func host(of uid: String) -> String? {
        guard isScreenShare(uid) else { return nil }
        return String(uid.dropLast(suffix.count))
    }
}

/// True when `uid` names a screen-share participant (`<host>_sub`): what the owner filter keys on.
public func isScreenShareUID(_ uid: String) -> Bool { ScreenShareUID.isScreenShare(uid) }
