// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// The async UDP API: datagrams as an AsyncSequence, sends that throw, the bounded buffer.
@Suite("Async UDP sockets", .timeLimit(.minutes(2)))
struct AsyncUdpSocketTests {
    @Test func sendsAndReceivesWithAPythonPeer() async throws {
        let peer = try PythonPeer("udpecho")
        defer { peer.stop() }
        try await AsyncUdpSocket(host: "127.0.0.1").executeThenClose { udp in
            let echo = try SocketAddress(ipAddress: "127.0.0.1", port: peer.port)
            var datagrams = udp.datagrams.makeAsyncIterator()
            for text in ["one", "two", ""] {
                try await udp.send(bytes(text), to: echo)
                let datagram = try #require(try await datagrams.next())
                #expect(datagram == Datagram(bytes: bytes(text), sender: echo), "empty datagrams too")
            }
            try await udp.send(bytes("by name"), toHost: "localhost", port: peer.port)
            #expect(try await datagrams.next()?.bytes == bytes("by name"))
        }
    }

    @Test func aConnectedSocketSendsToItsPeerAndErrorsAreThrown() async throws {
        let server = try AsyncUdpSocket(host: "127.0.0.1")
        defer { server.abort() }
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: server.localPort)
        let client = try await AsyncUdpSocket(connectedTo: address)
        defer { client.abort() }
        try await client.send(bytes("hello"))
        var incoming = server.datagrams.makeAsyncIterator()
        let datagram = try #require(try await incoming.next())
        #expect(datagram.bytes == bytes("hello") && datagram.sender.port == client.localPort)
        await #expect {
            try await client.send([UInt8](repeating: 0, count: 70_000))
        } throws: { error in
            (error as? SocketError)?.code == .badParam
        }
    }

    /// A consumer slower than its peer: SocketKit stops reading from the kernel while the
    /// buffer is full and resumes once half of it is taken; nothing is dropped by SocketKit
    /// and the buffer stays bounded.
    @Test func aSlowConsumerKeepsTheBufferBoundedAndLosesNothingThatTheKernelKept() async throws {
        let capacity = 8
        let receiver = try AsyncUdpSocket(host: "127.0.0.1", bufferCapacity: capacity) { socket in
            socket.receiveBufferSize = 1 << 20 // room in the kernel for what waits there
        }
        defer { receiver.abort() }
        let sender = try AsyncUdpSocket(host: "127.0.0.1")
        defer { sender.abort() }
        let destination = try SocketAddress(ipAddress: "127.0.0.1", port: receiver.localPort)
        let count = 300
        for index in 0..<count { try await sender.send(bytes("datagram \(index)"), to: destination) }
        // Nobody has taken any yet: SocketKit holds at most the buffer and the rest of one
        // batch, the kernel the others.
        #expect(await eventually { receiver.bufferedDatagrams >= capacity })
        #expect(receiver.bridge.state.withLock { $0.paused })
        var received: [String] = []
        for try await datagram in receiver.datagrams {
            received.append(String(decoding: datagram.bytes, as: UTF8.self))
            if received.count == count { break }
        }
        #expect(received == (0..<count).map { "datagram \($0)" })
        let highest = receiver.bridge.state.withLock { $0.highestBuffered }
        #expect(highest <= capacity + 63, "the buffer held \(highest) datagrams")
    }

    @Test func theSequenceEndsWhenTheSocketCloses() async throws {
        let udp = try AsyncUdpSocket(host: "127.0.0.1")
        let consumer = Task {
            var count = 0
            for try await _ in udp.datagrams { count += 1 }
            return count
        }
        await udp.close()
        #expect(try await consumer.value == 0)
        await #expect(throws: SocketError.self) { try await udp.send(bytes("late"), toHost: "127.0.0.1", port: 9) }
    }
}

@Suite("Async listeners", .timeLimit(.minutes(2)))
struct AsyncListenerTests {
    @Test func connectionsArriveInOrderAndTheSequenceEndsWithTheListener() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        let clients = try await (0..<3).asyncMap { _ in
            try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        }
        var accepted: [AsyncSocket] = []
        for try await connection in listener.connections {
            accepted.append(connection)
            if accepted.count == 3 { break }
        }
        for (client, server) in zip(clients, accepted) {
            try await server.write(bytes("hi"))
            #expect(try await client.read(exactly: 2) == bytes("hi"))
            #expect(server.socket.connectedPort == client.socket.localPort)
        }
        let waiting = Task {
            var iterator = listener.connections.makeAsyncIterator()
            return try await iterator.next()
        }
        listener.close()
        #expect(try await waiting.value == nil, "the sequence ends with the listener")
        for connection in clients + accepted { connection.abort() }
    }

    @Test func aListenerClosedByItsScopeClosesConnectionsNobodyTook() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        let client = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        try await listener.executeThenClose { _ in
            // Not taken: the connection waits in the listener.
            #expect(await eventually { listener.bridgeHoldsConnections })
        }
        #expect(try await client.read() == [], "closed with the listener")
        await client.close()
    }
}

extension AsyncListener {
    var bridgeHoldsConnections: Bool { bridge.heldConnections > 0 }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
