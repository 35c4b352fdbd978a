// swift-tools-version: 6.0
// The RTC SDK: client (RTCCore, ScreenShareUser), shared wire formats (RTCTransport, Signaling),
// the SFU (RTCServer) and the `rtc-cli` tool. See docs/architecture.md for the dependency graph.
import PackageDescription

let package = Package(
    name: "swift-rtc",
    products: [
        .library(name: "RTCCore", targets: ["RTCCore"]),
        .library(name: "RTCRecording", targets: ["RTCRecording"]),
        .library(name: "ScreenShareUser", targets: ["ScreenShareUser"]),
        .library(name: "RTCServer", targets: ["RTCServer"]),
        .executable(name: "rtc-server", targets: ["rtc-server"]),
        .executable(name: "rtc-cli", targets: ["rtc-cli"]),
        .executable(name: "rtc-relay", targets: ["rtc-relay"]),
        .executable(name: "rtc-sharer", targets: ["rtc-sharer"]),
        .executable(name: "rtc-capture", targets: ["rtc-capture"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        // LiveKit's signal protocol (protobuf): the runtime only; the Swift is generated once and committed.
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.28.0"),
    ],
    targets: [
        // MARK: C libraries from Debian's -dev packages
        .systemLibrary(name: "CVPX", pkgConfig: "vpx", providers: [.apt(["libvpx-dev"])]),
        .systemLibrary(name: "COpus", pkgConfig: "opus", providers: [.apt(["libopus-dev"])]),
        // libsrtp2 (on NSS): only the tests link it, as an oracle our SRTP is checked against.
        .systemLibrary(name: "CSRTP", pkgConfig: "libsrtp2", providers: [.apt(["libsrtp2-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CYUV", providers: [.apt(["libyuv-dev"])]),
        // A C facade (extern "C") over the C++-only webrtc-audio-processing (libwebrtc-audio-processing-dev).
        // Its pkg-config file carries -D flags that SwiftPM refuses, so the defines are set here and
        // the headers are found through Sources/CAPM/system/webrtc, a link to Debian's
        // /usr/include/webrtc_audio_processing/webrtc.
        .target(
            name: "CAPM",
            cxxSettings: [
                .headerSearchPath("system"),
                .define("WEBRTC_POSIX"), .define("WEBRTC_AUDIO_PROCESSING_ONLY_BUILD"),
            ],
            linkerSettings: [.linkedLibrary("webrtc_audio_processing")]),

        // A WebM muxer for encoded VP8 and Opus over libavformat (libavformat-dev; Debian's libwebm-dev
        // lacks mkvmuxer's headers). Only RTCRecording uses it.
        // libavformat is loaded with dlopen when the first WebM starts (rtc_webm.c says why), so no
        // binary links it: the headers come from libavformat-dev, the library from libavformat59.
        .target(name: "CWebM"),

        // SCTP over DTLS for data channels (RFC 8261) over libusrsctp (libusrsctp-dev) in its AF_CONN
        // mode, with no threads of its own (rtc_sctp.h). INET/INET6 as the library was built.
        .target(name: "CSCTP", cSettings: [.define("INET"), .define("INET6")], linkerSettings: [.linkedLibrary("usrsctp")]),

        // Process-memory helpers (releasing libvpx's unused token pages, malloc tuning) for the sharer's budget.
        .target(name: "CMemory"),

        // sendmmsg batches for the media sockets (RTCTransport's DatagramBatch): libc only.
        .target(name: "CDatagram"),
        // TLS for streams (wss://, https://, turns:) over the OpenSSL DTLS already links: a NIO
        // handler and its contexts. No second TLS library (BoringSSL) to build.
        .target(name: "TLSStream", dependencies: ["COpenSSL", .product(name: "NIOCore", package: "swift-nio")]),

        // MARK: Swift modules (DESIGN.md §2)
        // Conventions client and server share (the screen-share uid): no dependencies at all.
        .target(name: "RTCConventions"),
        .target(
            name: "RTCTransport",
            dependencies: [
                "COpenSSL", "CSCTP", "CDatagram", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // TURN over TLS (`turns:`).
                "TLSStream",
            ]),
        // The network impairment proxy (loss, delay, jitter, reorder, duplication, bandwidth cap,
        // blackouts) on loopback: the kernel here has no netem.
        .target(
            name: "NetSim",
            dependencies: [.product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        .target(
            name: "Signaling",
            dependencies: [
                "COpenSSL", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
                "TLSStream",
            ]),
        // Frames, pixel formats, media files (Y4M, IVF, WAV, Ogg), libyuv conversion, test patterns
        // and media threads: no codecs, no network, no Foundation (the relay sharer links this alone).
        .target(name: "RTCMedia", dependencies: ["RTCConventions", "CYUV", "CMemory"]),
        // End-to-end encryption of encoded frames in LiveKit's format (AES-GCM over OpenSSL's EVP,
        // PBKDF2 keys, the frame trailer): OpenSSL alone, so the fuzz harness and benches link it bare.
        .target(name: "RTCE2EE", dependencies: ["COpenSSL"]),
        .target(
            name: "RTCCore",
            dependencies: [
                "RTCMedia", "RTCTransport", "Signaling", "LiveKitProtocol", "RTCE2EE", "RTCConventions", "CVPX", "COpus", "CAPM", "CMemory",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // Recording what an engine receives: per-track IVF/WAV, per-participant WebM, the manifest.
        .target(
            name: "RTCRecording",
            dependencies: ["RTCCore", "CWebM", "Signaling", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        // Screen capture over Xlib + MIT-SHM (libx11-dev, libxext-dev), for the screen-share source.
        .target(name: "CX11Capture", linkerSettings: [.linkedLibrary("X11"), .linkedLibrary("Xext")]),
        // The capture side of a screen share: sources, the host link and its codec, the frame ring and
        // the relay loop. No codec, no network, no Foundation: `rtc-capture` is this alone.
        .target(name: "ScreenCapture", dependencies: ["RTCMedia", "CX11Capture"]),
        .target(
            name: "ScreenShareUser",
            dependencies: [
                "RTCCore", "ScreenCapture", "Signaling", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // LiveKit's protocol: the protobuf messages of its signal protocol, generated from Protos/livekit
        // (`make protos`) and committed, and its access tokens mapped onto ours.
        .target(
            name: "LiveKitProtocol",
            dependencies: ["Signaling", "RTCConventions", "TLSStream", .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        // RESP (the Redis protocol) values and parser: no dependencies, fuzzed.
        .target(name: "RedisWire"),
        .target(
            name: "RTCServer",
            dependencies: [
                "RTCConventions", "RTCTransport", "Signaling", "LiveKitProtocol", "RedisWire", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
                "TLSStream", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"), .product(name: "Prometheus", package: "swift-prometheus"),
            ]),
        // The server's command line (`rtc-server`, and `rtc-cli server`), media processes, and the
        // small process and loopback helpers both binaries use. No codecs, no X11, no libavformat.
        .target(
            name: "ServerCommandLine",
            dependencies: [
                "RTCConventions", "RTCServer", "RTCTransport", "Signaling", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
            ]),
        // The server operators run: RTCServer and its command line alone (DESIGN.md §2).
        .executableTarget(name: "rtc-server", dependencies: ["ServerCommandLine", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "rtc-cli",
            dependencies: [
                "RTCCore", "RTCRecording", "RTCTransport", "Signaling", "LiveKitProtocol", "ScreenShareUser", "RTCServer", "ServerCommandLine", "NetSim",
                "rtc-relay",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                "TLSStream",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The sharer process a host launches: ScreenShareUser alone, for the memory budget.
        .executableTarget(name: "rtc-sharer", dependencies: ["ScreenShareUser"]),
        // The relay-only sharer: captures and hands frames to the host, for the 20 MB relay budget.
        .executableTarget(name: "rtc-capture", dependencies: ["ScreenCapture"]),

        // MARK: Examples (Examples/README.md)
        .executableTarget(name: "example-stats", dependencies: ["RTCCore"], path: "Examples/StatsApp"),
        .executableTarget(name: "example-recorder", dependencies: ["RTCCore", "RTCRecording"], path: "Examples/RecorderBot"),
        .executableTarget(name: "example-share-host", dependencies: ["ScreenShareUser"], path: "Examples/ShareHost"),
        .executableTarget(
            name: "example-share-viewer",
            dependencies: ["RTCCore", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")], path: "Examples/ShareViewer"),

        // The floor of `rtc-cli bench sfu`: a minimal recvmmsg/sendmmsg relay in C.
        .executableTarget(name: "rtc-relay", path: "Benchmarks/relay"),

        // MARK: Fuzzing: one libFuzzer entry point per parser of untrusted bytes (see Fuzz/README.md)
        .target(
            name: "RTCFuzzHarness",
            dependencies: ["RTCMedia", "RTCTransport", "Signaling", "ScreenCapture", "RedisWire", "LiveKitProtocol", "RTCE2EE",
                           .product(name: "NIOCore", package: "swift-nio")]),

        // MARK: Tests
        .testTarget(name: "RTCCoreTests", dependencies: ["RTCCore", "CMemory", "TestKit", .product(name: "NIOCore", package: "swift-nio")]),
        .testTarget(name: "RTCE2EETests", dependencies: ["RTCE2EE", "RTCFuzzHarness"]),
        .testTarget(name: "RTCMediaTests", dependencies: ["RTCMedia", "RTCFuzzHarness", "TestKit"]),
        .testTarget(name: "ScreenCaptureTests", dependencies: ["ScreenCapture", "RTCFuzzHarness"]),
        .testTarget(
            name: "ScreenShareUserTests",
            dependencies: [
                "ScreenShareUser", "RTCServer", "RTCTestSupport", "Signaling", "NetSim", "rtc-cli", .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        .testTarget(name: "SignalingTests", dependencies: ["Signaling", "RTCFuzzHarness", "LiveKitProtocol", "COpenSSL"]),
        .testTarget(
            name: "RTCServerTests",
            dependencies: [
                "RTCServer", "RedisWire", "RTCFuzzHarness", "RTCConventions", "RTCTransport", "Signaling", "LiveKitProtocol", "TestKit", "CMemory", "TLSStream", "NetSim",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), "RTCTestSupport",
            ]),
        .testTarget(
            name: "RTCTransportTests",
            dependencies: [
                "RTCTransport", "Signaling", "RTCFuzzHarness", "TestKit", "CSRTP", "NetSim", .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            exclude: ["Fixtures"]),
        .testTarget(name: "CLITests", dependencies: ["rtc-cli", "rtc-server", "rtc-sharer", "rtc-capture", "RTCTestSupport"]),
        // Hosts in network namespaces the tests make (root): the product off loopback.
        .testTarget(name: "NetworkTests", dependencies: ["rtc-cli", "RTCTestSupport"]),
        .testTarget(
            name: "NetSimTests",
            dependencies: ["NetSim", "TestKit", .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        // The small helpers every test target may use: polling, running a tool, temporary
        // directories, signed tokens. Foundation and Signaling only (not a product).
        .target(name: "TestKit", dependencies: ["Signaling"]),
        // Helpers of the end-to-end tests: an embedded server, event logs, pattern and tone pushers,
        // the built rtc-cli's path; re-exports TestKit (not a product).
        .target(
            name: "RTCTestSupport",
            dependencies: [
                "TestKit", "RTCCore", "RTCServer", "Signaling", "LiveKitProtocol", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
            ]),
        .testTarget(
            name: "EngineTests",
            dependencies: [
                "RTCCore", "RTCRecording", "RTCServer", "RTCTestSupport", "rtc-cli", "Signaling", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        .testTarget(
            name: "InteropTests",
            dependencies: [
                "RTCCore", "RTCTransport", "TestKit", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // Every fuzz target in one executable (`rtc-fuzz NAME`, Fuzz/Main): the test build links it once.
        .executableTarget(name: "rtc-fuzz", dependencies: ["RTCFuzzHarness"], path: "Fuzz/Main"),
    ],
    cxxLanguageStandard: .cxx14
)
