// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// The UDP send fast path: a datagram sent on the loop thread with nothing queued ahead goes
/// to the kernel without a queued copy, and sends made from a receive callback are staged
/// and leave together in one `sendmmsg` when the receive batch ends. None of it may change
/// what the delegate sees: every datagram arrives, in order, and its didSend follows.
@Suite("UDP send fast path")
struct UdpSendFastPathTests {
    private func echoServer(_ onReceive: @escaping (UdpSocket, [UInt8], SocketAddress) -> Void) throws -> (UdpSocket, UdpRecorder) {
        let log = UdpRecorder()
        log.onReceive = onReceive
        let server = UdpSocket(delegate: log) // callbacks on the loop: the fast path applies
        try server.bind(toPort: 0, interface: "127.0.0.1")
        try server.beginReceiving()
        return (server, log)
    }

    private func client(to server: UdpSocket) throws -> (UdpSocket, UdpRecorder) {
        let log = UdpRecorder()
        let client = UdpSocket(delegate: log)
        try client.connect(toAddress: .ipv4Loopback(port: server.localPort))
        try client.beginReceiving()
        return (client, log)
    }

    @Test func echoesSentFromTheReceiveCallbackArriveInOrderEachWithItsDidSend() throws {
        let (server, serverLog) = try echoServer { sock, data, from in
            try? sock.send(data, toAddress: from, tag: Int(data[0]))
        }
        defer { server.close() }
        let (client, clientLog) = try client(to: server)
        defer { client.close() }
        // A burst, so that several datagrams share a receive batch and its sendmmsg.
        // Sizes vary (1 to 1,400 bytes), so staged datagrams sit at uneven offsets.
        let count = 100
        let datagrams: [[UInt8]] = (0..<count).map { (index: Int) -> [UInt8] in
            var bytes: [UInt8] = [UInt8(index)]
            for position in 0..<(index * 37 % 1400) { bytes.append(UInt8(truncatingIfNeeded: position &* 7 &+ index)) }
            return bytes
        }
        for index in 0..<count { try client.send(datagrams[index], tag: index) }
        #expect(clientLog.waitForReceived(count).count == count)
        #expect(clientLog.received == datagrams, "echoes differ")
        #expect(serverLog.wait { $0.filter { if case .sent = $0 { return true }; return false }.count == count })
        // Each datagram: received first, then its didSend; the didSends in sending order.
        var sentTags: [Int] = []
        var receivedSoFar = 0
        for event in serverLog.events {
            switch event {
            case .received: receivedSoFar += 1
            case .sent(let tag):
                #expect(tag < receivedSoFar, "didSend for \(tag) came before its datagram was received")
                sentTags.append(tag)
            default: Issue.record("unexpected event \(event)")
            }
        }
        #expect(sentTags == Array(0..<count))
        serverLog.checkContract()
        clientLog.checkContract()
    }

    @Test func aQueuedSendAfterStagedOnesLeavesAfterThem() throws {
        // The second send needs name resolution (the queued path): it must not overtake the
        // staged one, and later staged-eligible sends must wait behind it.
        let (server, serverLog) = try echoServer { sock, data, from in
            try? sock.send(data, toAddress: from, tag: 1)
            try? sock.send(data + [0xFF], toHost: "localhost", port: from.port, tag: 2)
        }
        defer { server.close() }
        let (client, clientLog) = try client(to: server)
        defer { client.close() }
        let count = 20
        for index in 0..<count { try client.send([UInt8(index)]) }
        #expect(clientLog.waitForReceived(2 * count).count == 2 * count)
        let expected: [[UInt8]] = (0..<count).flatMap { index -> [[UInt8]] in [[UInt8(index)], [UInt8(index), 0xFF]] }
        #expect(clientLog.received == expected)
        serverLog.checkContract()
        clientLog.checkContract()
    }

    @Test func closingInTheReceiveCallbackDropsTheStagedEchoWithoutCallbacks() throws {
        let (server, serverLog) = try echoServer { sock, data, from in
            try? sock.send(data, toAddress: from, tag: 7)
            sock.close()
        }
        let (client, clientLog) = try client(to: server)
        defer { client.close() }
        try client.send([1, 2, 3])
        #expect(serverLog.waitFor(.closed(nil)))
        // As for queued datagrams, a close drops staged ones without didSend/didNotSend.
        let events = serverLog.events
        #expect(events.count == 2)
        #expect(events.last == .closed(nil))
        if case .received(let data, _, _) = events.first { #expect(data == [1, 2, 3]) } else { Issue.record("no datagram") }
        serverLog.checkContract()
        clientLog.checkContract()
    }

    @Test func aConnectedSocketAnswersItsPeerFromTheReceiveCallback() throws {
        // Two sockets connected to each other: the answer has no destination.
        let firstLog = UdpRecorder()
        let first = UdpSocket(delegate: firstLog)
        defer { first.close() }
        let secondLog = UdpRecorder()
        let second = UdpSocket(delegate: secondLog)
        defer { second.close() }
        try first.bind(toPort: 0, interface: "127.0.0.1")
        try second.bind(toPort: 0, interface: "127.0.0.1")
        try first.connect(toAddress: .ipv4Loopback(port: second.localPort))
        try second.connect(toAddress: .ipv4Loopback(port: first.localPort))
        #expect(firstLog.wait { $0.contains { if case .connected = $0 { return true }; return false } })
        #expect(secondLog.wait { $0.contains { if case .connected = $0 { return true }; return false } })
        secondLog.onReceive = { sock, data, _ in try? sock.send(data.reversed(), tag: 9) }
        try first.beginReceiving()
        try second.beginReceiving()
        for round in 0..<10 { try first.send([UInt8(round), 8, 7], tag: round) }
        #expect(firstLog.waitForReceived(10).count == 10)
        #expect(firstLog.received == (0..<10).map { [7, 8, UInt8($0)] })
        #expect(secondLog.wait { $0.filter { $0 == .sent(tag: 9) }.count == 10 })
        firstLog.checkContract()
        secondLog.checkContract()
    }

    @Test func aDidSendThatSendsAgainSendsNothingTwice() throws {
        // Regression: didSend of a staged datagram ran while the staging area still held the
        // batch; a send from it (queued path) flushed the same datagrams a second time.
        let clientLog = UdpRecorder()
        let client = UdpSocket(delegate: clientLog)
        defer { client.close() }
        try client.bind(toPort: 0, interface: "127.0.0.1")
        try client.beginReceiving()
        let clientPort = client.localPort
        let (server, serverLog) = try echoServer { sock, data, from in
            try? sock.send(data, toAddress: from, tag: Int(data[0]))
        }
        defer { server.close() }
        serverLog.onSent = { sock, tag in
            if tag < 100 { try? sock.send([0xEE, UInt8(tag)], toHost: "localhost", port: clientPort, tag: 100 + tag) }
        }
        let count = 20
        for index in 0..<count { try client.send([UInt8(index)], toAddress: .ipv4Loopback(port: server.localPort)) }
        #expect(clientLog.waitForReceived(2 * count).count == 2 * count)
        #expect(serverLog.wait { $0.filter { if case .sent = $0 { return true }; return false }.count == 2 * count })
        // Nothing more than that: no datagram sent twice, no didSend twice.
        let received = clientLog.received
        #expect(received.filter { $0.count == 1 }.sorted { $0[0] < $1[0] } == (0..<count).map { [UInt8($0)] })
        #expect(received.filter { $0.count == 2 }.count == count)
        let sentTags = serverLog.events.compactMap { event -> Int? in if case .sent(let tag) = event { return tag }; return nil }
        #expect(sentTags.sorted() == Array(0..<count) + Array(100..<(100 + count)))
        serverLog.checkContract()
    }

    @Test func anUnboundSocketSendingFromTheLoopPublishesThePortTheKernelPicked() throws {
        // The relay, never bound, sends its first datagrams from a callback on its own loop:
        // its local port, picked by the kernel at the first send, must be published, and be
        // the one the datagrams came from. (The first send makes the descriptor, through the
        // queue; the second may go straight to the kernel.)
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let loop = group.next()
        let targetLog = UdpRecorder()
        let target = UdpSocket(delegate: targetLog, eventLoop: loop)
        defer { target.close() }
        try target.bind(toPort: 0, interface: "127.0.0.1")
        try target.beginReceiving()
        let relay = UdpSocket(eventLoop: loop)
        defer { relay.close() }
        #expect(relay.localPort == 0)
        let targetPort = target.localPort
        targetLog.onReceive = { _, data, _ in
            if data == [1] {
                for tag in 2...3 { try? relay.send([UInt8(tag)], toAddress: .ipv4Loopback(port: targetPort), tag: tag) }
            }
        }
        let trigger = UdpSocket()
        defer { trigger.close() }
        try trigger.send([1], toAddress: .ipv4Loopback(port: targetPort))
        #expect(targetLog.wait { events in events.filter { if case .received = $0 { return true }; return false }.count == 3 })
        let senders = targetLog.events.compactMap { event -> UInt16? in
            if case .received(let data, let from, _) = event, data != [1] { return from.port }
            return nil
        }
        #expect(senders.count == 2)
        #expect(relay.localPort != 0)
        #expect(senders.allSatisfy { $0 == relay.localPort })
    }

    @Test func answeringThenClosingAfterSendingDeliversTheAnswer() throws {
        // Regression: the answer, staged, was dropped by the close that followed it.
        let (server, serverLog) = try echoServer { sock, data, from in
            try? sock.send(data.reversed(), toAddress: from, tag: 4)
            sock.closeAfterSending()
        }
        let (client, clientLog) = try client(to: server)
        defer { client.close() }
        try client.send([1, 2, 3])
        #expect(clientLog.waitForReceived(1) == [[3, 2, 1]])
        #expect(serverLog.wait { $0.last == .closed(nil) })
        #expect(serverLog.events.dropFirst().elementsEqual([.sent(tag: 4), .closed(nil)]))
        serverLog.checkContract()
    }

    @Test func aDatagramTheKernelRefusesOnTheFastPathIsReportedNotRetried() throws {
        // Loopback answers a datagram to a closed port with an ICMP error the kernel keeps on
        // the connected socket; the next send (the fast path, on the loop) returns it. That
        // datagram fails with it (a retry would succeed and the error would be lost).
        let closed = UdpSocket()
        try closed.bind(toPort: 0, interface: "127.0.0.1")
        let deadPort = closed.localPort
        closed.close()
        let log = UdpRecorder()
        let client = UdpSocket(delegate: log)
        defer { client.close() }
        try client.connect(toAddress: .ipv4Loopback(port: deadPort))
        #expect(log.wait { $0.contains { if case .connected = $0 { return true }; return false } })
        client.perform { _ in
            try? client.send([1], tag: 1)
            try? client.send([2], tag: 2)
        }
        #expect(log.wait { $0.contains { if case .notSent(tag: 2, _, _) = $0 { return true }; return false } })
        #expect(log.events.contains(.sent(tag: 1)))
        #expect(log.events.contains { if case .notSent(tag: 2, _, errno: ECONNREFUSED) = $0 { return true }; return false })
        log.checkContract()
    }
}
