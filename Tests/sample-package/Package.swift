// swift-tools-version:6.0
// SPDX-License-Identifier: MIT
// A package outside SocketKit's repository that uses it as a user would: a dependency by
// path. Tests/sample-package/run.sh copies it to a temporary directory, points the path at
// the checkout (SOCKETKIT_PATH below), builds it with warnings as errors and runs it.
import PackageDescription

let package = Package(
    name: "socketkit-sample",
    dependencies: [.package(name: "socketkit", path: "SOCKETKIT_PATH")],
    targets: [
        // The README's two Swift programs, as they stand there (run.sh checks they match).
        .executableTarget(name: "readme-delegate", dependencies: [.product(name: "SocketKit", package: "socketkit")],
                          swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(name: "readme-async", dependencies: [.product(name: "SocketKit", package: "socketkit")],
                          swiftSettings: [.swiftLanguageMode(.v6)]),
        // The async API end to end: a TCP echo, a STARTTLS exchange, a UDP exchange.
        .executableTarget(name: "async-sample", dependencies: [.product(name: "SocketKit", package: "socketkit")],
                          swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
