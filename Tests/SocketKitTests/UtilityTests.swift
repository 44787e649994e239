// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

@Suite("Addresses, utilities and errors")
struct UtilityTests {
    @Test func ipLiteralsParseAndPrint() throws {
        let v4 = try SocketAddress(ipAddress: "192.0.2.7", port: 8080)
        #expect(v4.family == .ipv4 && v4.host == "192.0.2.7" && v4.port == 8080)
        #expect(v4.bytes.count == MemoryLayout<sockaddr_in>.size)
        #expect(v4.description == "192.0.2.7:8080")
        let v6 = try SocketAddress(ipAddress: "2001:db8::1", port: 443)
        #expect(v6.family == .ipv6 && v6.host == "2001:db8::1" && v6.port == 443)
        #expect(v6.description == "[2001:db8::1]:443")
        let scoped = try SocketAddress(ipAddress: "fe80::1%lo", port: 1)
        #expect(scoped.host == "fe80::1%lo")
        #expect(throws: SocketError.self) { try SocketAddress(ipAddress: "example.com", port: 1) }
        #expect(throws: SocketError.self) { try SocketAddress(ipAddress: "fe80::1%no-such-if0", port: 1) }
        #expect(throws: SocketError.self) { try SocketAddress(ipAddress: "300.1.1.1", port: 1) }
        #expect(SocketAddress(bytes: v6.bytes) == v6)
    }

    @Test func rawAddressHelpersRejectGarbage() throws {
        let v4 = try SocketAddress(ipAddress: "127.0.0.1", port: 99)
        #expect(Socket.host(fromAddress: v4.bytes) == "127.0.0.1")
        #expect(Socket.port(fromAddress: v4.bytes) == 99)
        #expect(Socket.isIPv4Address(v4.bytes) && !Socket.isIPv6Address(v4.bytes))
        for garbage: [UInt8] in [[], [1], [2, 0, 0], Array(repeating: 0xFF, count: 16), Array(v4.bytes.dropLast())] {
            #expect(Socket.host(fromAddress: garbage) == nil)
            #expect(Socket.port(fromAddress: garbage) == 0)
            #expect(!Socket.isIPv4Address(garbage) && !Socket.isIPv6Address(garbage))
            #expect(SocketAddress(bytes: garbage) == nil)
        }
    }

    /// As getnameinfo and the kernel: an IP address may come with any length from its
    /// family's struct up to a sockaddr_storage (128 bytes); the bytes beyond are ignored.
    @Test func ipAddressesMayComeWithTheLengthOfASockaddrStorage() throws {
        let storage = MemoryLayout<sockaddr_storage>.size
        for address in [try SocketAddress(ipAddress: "192.0.2.1", port: 443),
                        try SocketAddress(ipAddress: "fd00::2", port: 8080)] {
            for extra in [1, 7, storage - address.bytes.count] {
                let padded = address.bytes + Array(repeating: 0xEE, count: extra)
                #expect(SocketAddress(bytes: padded) == address)
                #expect(SocketAddress(bytes: padded)?.bytes == address.bytes)
                #expect(Socket.host(fromAddress: padded) == address.host)
                #expect(Socket.port(fromAddress: padded) == address.port)
                #expect(UdpSocket.host(fromAddress: padded) == address.host)
                #expect(Socket.isIPv4Address(padded) == (address.family == .ipv4))
                #expect(Socket.isIPv6Address(padded) == (address.family == .ipv6))
            }
            let tooLong = address.bytes + Array(repeating: 0, count: storage - address.bytes.count + 1)
            #expect(SocketAddress(bytes: tooLong) == nil)
            #expect(Socket.host(fromAddress: tooLong) == nil)
        }
        // A Unix-domain address keeps the kernel's limit (sizeof(sockaddr_un)).
        var unix = try SocketAddress(unixPath: "/tmp/x").bytes
        unix += Array(repeating: 0, count: MemoryLayout<sockaddr_un>.size - unix.count)
        #expect(SocketAddress(bytes: unix)?.unixPath == "/tmp/x")
        #expect(SocketAddress(bytes: unix + [0]) == nil)
    }

    @Test func unixAddresses() throws {
        let address = try SocketAddress(unixPath: "/tmp/x.sock")
        #expect(address.family == .unix && address.unixPath == "/tmp/x.sock")
        #expect(address.host == nil && address.port == 0)
        #expect(throws: SocketError.self) { try SocketAddress(unixPath: "") }
        #expect(throws: SocketError.self) { try SocketAddress(unixPath: String(repeating: "a", count: 108)) }
        #expect(throws: SocketError.self) { try SocketAddress(unixPath: "a\u{0}b") }
        #expect(try SocketAddress(unixPath: String(repeating: "a", count: 107)).unixPath?.count == 107)
    }

    @Test func lookupHostGivesBothLoopbacksForLocalhost() throws {
        #expect(try Socket.lookupHost("localhost", port: 7).map(\.description) == ["127.0.0.1:7", "[::1]:7"])
        #expect(try Socket.lookupHost("loopback", port: 7).count == 2)
        #expect(try Socket.lookupHost("::1", port: 9).map(\.description) == ["[::1]:9"])
        let error = #expect(throws: SocketError.self) { try Socket.lookupHost("no-such-host.invalid", port: 1) }
        #expect(error?.code == .resolution)
        #expect(throws: SocketError.self) { try Socket.lookupHost("", port: 1) }
    }

    @Test func separators() {
        #expect(Socket.crlf == [13, 10] && Socket.cr == [13] && Socket.lf == [10] && Socket.zero == [0])
    }

    @Test func interfaceDescriptionsSplitIntoNameAndPort() throws {
        #expect(try Interfaces.split("eth0") == ("eth0", nil))
        #expect(try Interfaces.split("eth0:8082") == ("eth0", 8082))
        #expect(try Interfaces.split(":8082") == (nil, 8082))
        #expect(try Interfaces.split("::1") == ("::1", nil))
        #expect(try Interfaces.split("[::1]:80") == ("::1", 80))
        #expect(try Interfaces.split("192.168.4.35") == ("192.168.4.35", nil))
        #expect(throws: SocketError.self) { try Interfaces.split("eth0:http") }
        #expect(throws: SocketError.self) { try Interfaces.split("[::1") }
        let loopback = try Interfaces.endpoints(for: "lo", port: 5)
        #expect(loopback.ipv4?.host == "127.0.0.1" && loopback.ipv4?.port == 5)
        #expect(throws: SocketError.self) { try Interfaces.endpoints(for: "no-such-if0", port: 1) }
    }

    @Test func errorCodesAreDistinctNamedAndStable() {
        let codes = SocketError.Code.all
        #expect(Set(codes.map(\.rawValue)).count == codes.count)
        #expect(codes.map(\.rawValue) == Array((1...Int32(codes.count)).map { -$0 }))
        #expect(Set(codes.map(\.name)).count == codes.count)
        #expect(codes.allSatisfy { !$0.summary.isEmpty && $0.summary != "unknown error" })
        let error = SocketError.systemError(ECONNREFUSED, "connect")
        #expect(error.code == .system && error.osError == ECONNREFUSED)
        #expect(error.description.contains("Connection refused"))
    }
}
