/// The uid convention of the screen-share auxiliary user: the sharer of host `1001` joins as
/// `1001_sub` (with the standard suffix). Client and server both key on it: the server reports a
/// sharer with its owner, hides it from the owner and removes it when the owner leaves; clients
/// filter it out of their own views. A server may use another suffix
/// (`ServerConfiguration.screenShareSuffix`), which it tells clients in `JoinResponse`.
public struct ScreenShareUID: Sendable, Hashable {
    /// The suffix this SDK uses unless configured otherwise.
    public static let standard = "_sub"

    /// The suffix that marks a screen-share participant. An empty one marks none.
    public let suffix: String

    public init(suffix: String = ScreenShareUID.standard) { self.suffix = suffix }

    /// The uid the screen sharer of `hostUID` joins with; a screen-share uid is its own (the same
    /// rule as `Web/screen-share-uid.js`, both checked against `Tests/Fixtures/screen-share-uids.json`).
    public func sharer(of hostUID: String) -> String { isScreenShare(hostUID) ? hostUID : hostUID + suffix }

    /// True when `uid` names a screen-share participant: `<host><suffix>` with a non-empty host.
    public func isScreenShare(_ uid: String) -> Bool {
        !suffix.isEmpty && uid.count > suffix.count && uid.hasSuffix(suffix)
    }

    /// The host uid of a screen-share uid, or nil when `uid` is not one.
    public func host(of uid: String) -> String? {
        guard isScreenShare(uid) else { return nil }
        return String(uid.dropLast(suffix.count))
    }
}

// MARK: The standard convention, as static API (what callers used before suffixes were configurable)

extension ScreenShareUID {
    /// The standard suffix, `_sub`.
    public static let suffix = standard

    /// The uid the screen sharer of `hostUID` joins with, under the standard suffix.
    public static func sharer(of hostUID: String) -> String { ScreenShareUID().sharer(of: hostUID) }

    /// True when `uid` names a screen-share participant under the standard suffix.
    public static func isScreenShare(_ uid: String) -> Bool { ScreenShareUID().isScreenShare(uid) }

    /// The host uid of a screen-share uid under the standard suffix, or nil.
    public static func host(of uid: String) -> String? { ScreenShareUID().host(of: uid) }
}

/// True when `uid` names a screen-share participant (`<host>_sub`): what the owner filter keys on.
public func isScreenShareUID(_ uid: String) -> Bool { ScreenShareUID.isScreenShare(uid) }
