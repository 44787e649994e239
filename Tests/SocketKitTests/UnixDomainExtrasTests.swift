// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Testing
@testable import SocketKit

/// A Unix-domain listener (on a path, or an abstract name), a client connected to it and the
/// accepted server side, each with a recorder.
final class UnixPair: @unchecked Sendable {
    let listener: Socket
    let listenerRecorder: Recorder
    let client: Socket
    let clientRecorder: Recorder
    let server: Socket
    let serverRecorder = Recorder("server")

    init(abstractName: String? = nil, configureListener: (Socket) throws -> Void = { _ in }) throws {
        (listener, listenerRecorder) = recordedSocket("listener")
        try configureListener(listener)
        let serverRecorder = self.serverRecorder
        listenerRecorder.onAccept = { _, newSocket in newSocket.delegate = serverRecorder }
        (client, clientRecorder) = recordedSocket("client")
        if let abstractName {
            try listener.accept(onAbstractUnixName: abstractName)
            try client.connect(toAbstractUnixName: abstractName, timeout: 10)
        } else {
            let path = temporaryUnixPath("extras")
            try listener.accept(onUnixPath: path)
            try client.connect(toUnixPath: path, timeout: 10)
        }
        guard clientRecorder.waitForConnect() else { throw TestFailure("no connect: \(clientRecorder.events)") }
        guard let accepted = listenerRecorder.waitForAccepted(1).first else { throw TestFailure("nothing accepted") }
        server = accepted
    }

    func close() {
        client.disconnect()
        server.disconnect()
        listener.disconnect()
    }
}

/// Linux abstract names, descriptors passed with the bytes (SCM_RIGHTS) and the peer's
/// credentials (SO_PEERCRED) (issue 32, item 6).
@Suite("Unix-domain extras")
struct UnixDomainExtrasTests {
    static func uniqueName(_ tag: String) -> String {
        "socketkit-test-\(getpid())-\(tag)-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// A pipe: (read end, write end).
    static func makePipe() throws -> (Int32, Int32) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw TestFailure("pipe: \(errno)") }
        return (ends[0], ends[1])
    }

    /// Writes `text` to `fd` and reads it back from `readEnd` (a pipe's): they are one pipe.
    static func sameFile(_ fd: Int32, _ readEnd: Int32, _ text: String) -> Bool {
        let data = bytes(text)
        guard write(fd, data, data.count) == data.count else { return false }
        var buffer = [UInt8](repeating: 0, count: data.count)
        return read(readEnd, &buffer, buffer.count) == data.count && buffer == data
    }

    @Test func abstractNamesListenAndConnectWithNoFileAndShowAsAtNames() throws {
        let name = Self.uniqueName("abstract")
        let pair = try UnixPair(abstractName: name)
        #expect(pair.clientRecorder.events.contains(.connectedUnix(path: "@" + name)))
        #expect(pair.client.connectedUnixPath == "@" + name)
        #expect(pair.listener.isUnixDomain && pair.listener.localAddress?.abstractUnixName == Array(name.utf8))
        try pair.client.write(bytes("over the abstract name"))
        try pair.server.read(toLength: 22, tag: 1)
        #expect(pair.serverRecorder.waitForBytes(22) == bytes("over the abstract name"))

        // A peer SocketKit did not make reaches it by the same address.
        let address = try SocketAddress(abstractUnixName: name)
        let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(address.withSockAddr { Glibc.connect(raw, $0, $1) } == 0)
        close(raw)
        // Taken while it listens; free once it stops, leaving nothing behind.
        let (second, _) = recordedSocket("second")
        #expect { try second.accept(onAbstractUnixName: name) } throws: { ($0 as? SocketError)?.osError == EADDRINUSE }
        pair.close()
        try second.accept(onAbstractUnixName: name)
        second.disconnect()
        let refused = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(address.withSockAddr { Glibc.connect(refused, $0, $1) } == -1 && errno == ECONNREFUSED)
        close(refused)
    }

    @Test func abstractNamesAreBytesAndBadOnesAreRefused() throws {
        let withNUL: [UInt8] = Array("sk\0nul-\(getpid())-\(UInt32.random(in: 0...UInt32.max))".utf8)
        let (listener, _) = recordedSocket("listener")
        try listener.accept(onAbstractUnixName: withNUL)
        defer { listener.disconnect() }
        #expect(listener.localAddress?.abstractUnixName == withNUL)
        for bad in [[UInt8](), [UInt8](repeating: 65, count: 108)] {
            #expect { try SocketAddress(abstractUnixName: bad) } throws: { ($0 as? SocketError)?.code == .badParam }
            #expect { try Socket().connect(toAbstractUnixName: bad) } throws: { ($0 as? SocketError)?.code == .badParam }
        }
        #expect(try SocketAddress(abstractUnixName: [UInt8](repeating: 65, count: 107)).abstractUnixName?.count == 107)
        #expect(try SocketAddress(unixPath: "/tmp/x").abstractUnixName == nil)
    }

    @Test func peerCredentialsAreThePeerProcesssAndOnlyUnixSocketsHaveThem() throws {
        let pair = try UnixPair()
        defer { pair.close() }
        for socket in [pair.client, pair.server] {
            let credentials = try socket.peerCredentials()
            #expect(credentials == PeerCredentials(processID: getpid(), userID: getuid(), groupID: getgid()))
        }
        let tcp = try Pair()
        defer { tcp.close() }
        #expect { try tcp.client.peerCredentials() } throws: { ($0 as? SocketError)?.code == .badConfig }
        #expect { try Socket().peerCredentials() } throws: { ($0 as? SocketError)?.code == .badConfig }
    }

    @Test func descriptorsPassWithTheirBytesInOrderAndTheSenderKeepsItsOwn() throws {
        // Set on the listener: the accepted socket takes it.
        let pair = try UnixPair(configureListener: { $0.receivesDescriptors = true })
        defer { pair.close() }
        #expect(pair.server.receivesDescriptors)
        let (firstRead, firstWrite) = try Self.makePipe()
        let (secondRead, secondWrite) = try Self.makePipe()
        defer { for fd in [firstRead, firstWrite, secondRead, secondWrite] { close(fd) } }
        try pair.client.write(bytes("aa"), passingDescriptors: [firstWrite], tag: 1)
        try pair.client.write(bytes("bb"), tag: 2)
        try pair.client.write(bytes("cc"), passingDescriptors: [secondWrite, firstWrite], tag: 3)
        #expect(pair.clientRecorder.wait { $0.filter { if case .wrote = $0 { true } else { false } }.count == 3 })

        let taken = LockedValue<[[Int32]]>([])
        let allRead = Latch()
        pair.serverRecorder.onRead = { socket, _, _ in
            let count = taken.withLock { list in
                list.append((try? socket.takeReceivedDescriptors()) ?? [])
                return list.count
            }
            if count == 3 { allRead.open() }
        }
        for tag in 1...3 { try pair.server.read(toLength: 2, tag: tag) }
        #expect(pair.serverRecorder.waitForBytes(6) == bytes("aabbcc"))
        #expect(allRead.wait()) // the hook runs after the event is recorded
        let perRead = taken.withLock { $0 }
        // Each descriptor is there by the time its bytes are read (perhaps earlier).
        #expect(perRead.count == 3 && !perRead[0].isEmpty)
        let received = perRead.flatMap { $0 }
        try #require(received.count == 3)
        defer { for fd in received { close(fd) } }
        #expect(Self.sameFile(received[0], firstRead, "first"))
        #expect(Self.sameFile(received[1], secondRead, "second"))
        #expect(Self.sameFile(received[2], firstRead, "again"))
        // The sender's own descriptors stayed open.
        #expect(Self.sameFile(firstWrite, firstRead, "mine"))
        #expect(try pair.server.takeReceivedDescriptors().isEmpty)
    }

    /// Off (the default), the kernel closes passed descriptors as their bytes are read; and
    /// those received and never taken are closed with the socket: none leaks.
    @Test func descriptorsNobodyTakesAreClosed() throws {
        let (readEnd, writeEnd) = try Self.makePipe()
        defer { close(readEnd) }
        var passed = writeEnd
        do {
            let pair = try UnixPair(configureListener: { $0.receivesDescriptors = true })
            let plain = try UnixPair()
            defer { plain.close() }
            try plain.client.write(bytes("x"), passingDescriptors: [writeEnd])
            try plain.server.read(toLength: 1, tag: 1)
            #expect(plain.serverRecorder.waitForBytes(1) == bytes("x"))
            #expect(try plain.server.receivedDescriptorCount() == 0)
            try pair.client.write(bytes("y"), passingDescriptors: [writeEnd])
            close(writeEnd)
            passed = -1
            try pair.server.read(toLength: 1, tag: 1)
            #expect(pair.serverRecorder.waitForBytes(1) == bytes("y"))
            #expect(try pair.server.receivedDescriptorCount() == 1)
            // A new session of the same socket closes what the last one left.
            pair.client.disconnect()
            #expect(pair.serverRecorder.waitForDisconnect() != nil)
            #expect(try pair.server.receivedDescriptorCount() == 1) // still takeable after the end
            let peer = try RawSocket.listen()
            defer { peer.close() }
            try pair.server.connect(toHost: "127.0.0.1", port: peer.localPort, timeout: 5)
            #expect(try pair.server.receivedDescriptorCount() == 0)
            pair.close()
        }
        if passed >= 0 { close(passed) }
        // Every write end is closed: the pipe reads its end.
        var byte: UInt8 = 0
        #expect(read(readEnd, &byte, 1) == 0)
    }

    @Test func passingDescriptorsIsCheckedBeforeAnythingIsQueued() throws {
        let pair = try UnixPair()
        defer { pair.close() }
        let (readEnd, writeEnd) = try Self.makePipe()
        defer { close(readEnd); close(writeEnd) }
        func refused(_ expected: SocketError.Code, _ body: () throws -> Void) {
            #expect { try body() } throws: { ($0 as? SocketError)?.code == expected }
        }
        refused(.badParam) { try pair.client.write([], passingDescriptors: [writeEnd]) }
        refused(.badParam) { try pair.client.write(bytes("x"), passingDescriptors: []) }
        refused(.badParam) { try pair.client.write(bytes("x"), passingDescriptors: [-1]) }
        refused(.badParam) { try pair.client.write(bytes("x"), passingDescriptors: [writeEnd, 987_654]) }
        refused(.badParam) {
            try pair.client.write(bytes("x"), passingDescriptors: [Int32](repeating: writeEnd, count: 254))
        }
        #expect(pair.client.queuedWriteBytes == 0)
        let tcp = try Pair()
        defer { tcp.close() }
        #expect { try tcp.client.write(bytes("x"), passingDescriptors: [writeEnd]) } throws: {
            ($0 as? SocketError)?.code == .badConfig
        }
    }
}
