// SPDX-License-Identifier: MIT
import SocketKitC
import Testing
@testable import SocketKit

/// The Swift face of the version against the C face's: both come from the header's version
/// block, whose derived literals (SK_VERSION_NUMBER, SK_VERSION_STRING) must agree with its
/// three numbers. Tests/check_version.py checks the other copies (Makefile, pkg-config,
/// CMake, the Python package and its wheel).
@Suite("The version")
struct VersionTests {
    @Test func swiftConstantsAgreeWithTheHeaderAndTheCFunctions() {
        #expect(SocketKitVersion.number == Int(SK_VERSION_NUMBER))
        #expect(SocketKitVersion.string == SK_VERSION_STRING)
        #expect(SocketKitVersion.string == String(cString: SocketKit.sk_version()!))
        #expect(SocketKitVersion.number == Int(SocketKit.sk_version_number()))
        #expect(SocketKitVersion.string.split(separator: ".").map { Int($0)! }
                == [SocketKitVersion.major, SocketKitVersion.minor, SocketKitVersion.patch])
    }
}
