import ScreenCapture
import Testing

/// The X11 source on its own; capture from a real (Xvfb) display to a viewer is in ScreenShareUserTests.
@Suite("X11 screen source")
struct X11SourceTests {
    @Test("bad X11 settings give clear errors")
    func badSettings() {
        #expect(throws: ScreenSourceError.self) { try X11ScreenSource(display: ":4242") }
    }
}
