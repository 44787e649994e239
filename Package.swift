// swift-tools-version:6.0
import PackageDescription

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
        .executable(name: "socketkit-demo", targets: ["socketkit-demo"]),
        .executable(name: "socketkit-echo", targets: ["socketkit-echo"]),
        .executable(name: "socketkit-async-echo", targets: ["socketkit-async-echo"]),
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
        .executableTarget(
            name: "socketkit-async-echo",
            dependencies: ["SocketKit"],
            path: "bench/swift-async-echo",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "SocketKitTests",
            dependencies: ["SocketKit"],
            path: "Tests/SocketKitTests",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)

// `make docs`: the DocC plugin (swiftlang/swift-docc-plugin), only when asked for, so that
// building SocketKit, and depending on it, needs no package of anyone else.
if Context.environment["SOCKETKIT_DOCS"] != nil {
    package.dependencies.append(.package(url: "https://github.com/swiftlang/swift-docc-plugin", exact: "1.5.0"))
}
