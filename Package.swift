// swift-tools-version:6.1
// SPDX-License-Identifier: MIT
import PackageDescription

// SocketKit: asynchronous TCP, TLS, Unix-domain and UDP sockets with the CocoaAsyncSocket
// model. Copyright (c) 2026 The SocketKit authors; MIT License (the LICENSE file).
//
// The shipping library (`make`) is built from this manifest with extra linker flags on the
// command line (version script, soname, -z nodelete, static Swift runtime), so that the
// package stays usable as a plain dependency: unsafeFlags would forbid that.
let package = Package(
    name: "socketkit",
    products: [
        // libsocketkit.so: the C library (its C API is in Sources/SocketKit/CAPI).
        .library(name: "socketkit", type: .dynamic, targets: ["SocketKit"]),
        // `import SocketKit` for Swift users.
        .library(name: "SocketKit", targets: ["SocketKit"]),
        // `import SocketKitLogging`: SocketKit's log to swift-log (SocketKitLog.forward(to:)),
        // with the SwiftLog trait. A product of its own so that SocketKit, and the C library,
        // depend on nothing but libc and OpenSSL: without the trait swift-log is not even
        // resolved (SwiftPM prunes a dependency that only disabled traits use).
        .library(name: "SocketKitLogging", targets: ["SocketKitLogging"]),
        .executable(name: "socketkit-demo", targets: ["socketkit-demo"]),
        .executable(name: "socketkit-echo", targets: ["socketkit-echo"]),
    ],
    traits: [
        .trait(name: "SwiftLog", description: "SocketKitLogging: SocketKit's log to apple/swift-log"),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .target(
            name: "SocketKitC",
            path: "Sources/SocketKitC",
            // TLS: OpenSSL 3 from the system (libssl-dev).
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),
        .target(
            name: "SocketKit",
            dependencies: ["SocketKitC"],
            path: "Sources/SocketKit",
            exclude: ["socketkit.map"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .target(
            name: "SocketKitLogging",
            dependencies: [
                "SocketKit",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["SwiftLog"])),
            ],
            path: "Sources/SocketKitLogging",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "socketkit-demo",
            dependencies: ["SocketKit"],
            path: "Sources/socketkit-demo",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "socketkit-echo",
            dependencies: ["SocketKit"],
            path: "bench/swift-echo",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "SocketKitTests",
            dependencies: [
                "SocketKit",
                "SocketKitLogging",
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["SwiftLog"])),
            ],
            path: "Tests/SocketKitTests",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
