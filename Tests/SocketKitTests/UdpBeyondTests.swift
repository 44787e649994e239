// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A sender bound to `source` (a 127/8 address: every one is local on lo) whose multicast
/// leaves through lo and loops back to this host.
private func multicastSender(from source: String) throws -> UdpSocket {
    let sender = UdpSocket(delegate: UdpRecorder())
    sender.isIPv6Enabled = false
    try sender.bind(toAddress: SocketAddress(ipAddress: source, port: 0))
    try sender.setMulticastLoopback(true)
    try sender.sendIPv4Multicast(onInterface: "lo")
    return sender
}

@Suite("UDP beyond CocoaAsyncSocket")
struct UdpBeyondTests {
    /// Loopback delivers within the sender's sendmsg, so a datagram the filter let through
    /// would arrive before the marker sent after it: waiting for the marker is enough to know
    /// it was not let through.
    @Test func sourceSpecificMulticastReceivesOnlyTheJoinedSource() throws {
        let group = "232.1.2.3"
        let log = UdpRecorder()
        let receiver = UdpSocket(delegate: log)
        defer { receiver.close() }
        #expect(throws: SocketError.self) { try receiver.joinMulticastGroup(group, source: "127.0.0.1") } // not bound
        try receiver.bind(toPort: 0)
        let port = receiver.localPort
        try receiver.beginReceiving()
        let allowed = try multicastSender(from: "127.0.0.1")
        let other = try multicastSender(from: "127.0.0.2")
        defer { allowed.close(); other.close() }

        for (bad, why) in [("not-an-address", "group"), ("::1", "families")] {
            do {
                try receiver.joinMulticastGroup(bad == "::1" ? group : bad, source: bad == "::1" ? "::1" : "127.0.0.1",
                                                onInterface: "lo")
                Issue.record("a bad \(why) was accepted")
            } catch { #expect(error.code == .badParam, "\(why): \(error)") }
        }
        #expect(throws: SocketError.self) { try receiver.joinMulticastGroup(group, source: "no-source") }

        try receiver.joinMulticastGroup(group, source: "127.0.0.1", onInterface: "lo")
        try other.send([2], toHost: group, port: port)
        try allowed.send([1], toHost: group, port: port)
        #expect(log.waitForReceived(1) == [[1]])

        // Leave that source and join the other: now only 127.0.0.2's datagrams arrive.
        try receiver.leaveMulticastGroup(group, source: "127.0.0.1", onInterface: "lo")
        do {
            try receiver.leaveMulticastGroup(group, source: "127.0.0.1", onInterface: "lo")
            Issue.record("leaving a source not joined succeeded")
        } catch { #expect(error.code == .system) }
        try receiver.joinMulticastGroup(group, source: "127.0.0.2", onInterface: "lo")
        try allowed.send([3], toHost: group, port: port)
        try other.send([4], toHost: group, port: port)
        #expect(log.waitForReceived(2) == [[1], [4]])
        log.checkContract()
    }
}

/// Records what packet info each datagram came with (nil: through the method without it).
final class PacketInfoRecorder: UdpSocketDelegate, @unchecked Sendable {
    private let lock = ConditionLock()
    private var log: [([UInt8], UdpPacketInfo?)] = []

    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        lock.withLock { log.append((data, nil)); lock.broadcast() }
    }

    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) {
        lock.withLock { log.append((data, packetInfo)); lock.broadcast() }
    }

    func waitFor(_ count: Int) -> [([UInt8], UdpPacketInfo?)] {
        let limit = deadline(afterSeconds: 10)
        lock.lock()
        defer { lock.unlock() }
        while log.count < count && lock.wait(untilDeadline: limit) {}
        return log
    }
}

extension UdpBeyondTests {
    /// A socket bound to the wildcard address learns which of its addresses each datagram
    /// was sent to (127.0.0.1, 127.0.0.3, a multicast group, ::1) and that it came in on lo.
    @Test func packetInfoGivesEachDatagramsDestinationAndInterface() throws {
        let log = PacketInfoRecorder()
        let receiver = UdpSocket(delegate: log)
        defer { receiver.close() }
        try receiver.bind(toPort: 0)
        let port = receiver.localPort
        #expect(!receiver.receivesPacketInfo)
        try receiver.beginReceiving()
        let sender = try multicastSender(from: "127.0.0.1")
        defer { sender.close() }
        try sender.send([0], toHost: "127.0.0.1", port: port) // before: no packet info
        #expect(log.waitFor(1).map { $0.1 } == [nil])

        try receiver.setReceivesPacketInfo(true)
        #expect(receiver.receivesPacketInfo)
        try receiver.joinMulticastGroup("239.255.42.77", onInterface: "lo")
        try sender.send([1], toHost: "127.0.0.1", port: port)
        try sender.send([2], toHost: "127.0.0.3", port: port)
        try sender.send([3], toHost: "239.255.42.77", port: port)
        let loopbackIndex = if_nametoindex("lo")
        var expected: [([UInt8], String)] = [([1], "127.0.0.1"), ([2], "127.0.0.3"), ([3], "239.255.42.77")]
        _ = log.waitFor(1 + expected.count) // the IPv6 datagram comes through the other descriptor: after these
        if receiver.isIPv6 {
            let sender6 = UdpSocket(delegate: UdpRecorder())
            defer { sender6.close() }
            try sender6.send([4], toHost: "::1", port: port)
            expected.append(([4], "::1"))
        }
        let received = log.waitFor(1 + expected.count).dropFirst()
        #expect(received.map { $0.0 } == expected.map { $0.0 })
        for ((data, info), (_, destination)) in zip(received, expected) {
            #expect(info?.destination.host == destination, "datagram \(data)")
            #expect(info?.interfaceIndex == loopbackIndex, "datagram \(data)")
            #expect(info?.interfaceName == "lo")
        }

        try receiver.setReceivesPacketInfo(false)
        try sender.send([5], toHost: "127.0.0.1", port: port)
        let last = log.waitFor(2 + expected.count).last
        #expect(last?.0 == [5] && last?.1 == nil)
    }

    /// Packet info survives a receive filter that runs on another queue, and the
    /// descriptors made after it was turned on get it too.
    @Test func packetInfoThroughAnAsynchronousFilterAndOnLaterDescriptors() throws {
        let log = PacketInfoRecorder()
        let receiver = UdpSocket(delegate: log)
        defer { receiver.close() }
        try receiver.setReceivesPacketInfo(true) // no descriptors yet
        try receiver.bind(toPort: 0, interface: "127.0.0.1")
        try receiver.setReceiveFilter({ data, _ in data == [9] ? .drop : .accept(context: nil) },
                                      queue: nil, isAsynchronous: true)
        try receiver.beginReceiving()
        let sender = UdpSocket(delegate: UdpRecorder())
        defer { sender.close() }
        try sender.send([9], toHost: "127.0.0.1", port: receiver.localPort)
        try sender.send([8], toHost: "127.0.0.1", port: receiver.localPort)
        let received = log.waitFor(1)
        #expect(received.map { $0.0 } == [[8]])
        #expect(received.first?.1?.destination.host == "127.0.0.1")
    }
}

extension UdpBeyondTests {
    /// A 1000-byte send with a segment size of 100 leaves as ten datagrams; a receiver with
    /// receive offload gets them coalesced from the kernel and hands over each, in order,
    /// each held to its limit; a receiver without it gets ten datagrams from the kernel.
    @Test(arguments: [true, false])
    func segmentationOffloadSendsDatagramsReceiveOffloadCutsThemApart(receiveOffload: Bool) throws {
        let log = UdpRecorder()
        let receiver = UdpSocket(delegate: log)
        defer { receiver.close() }
        #expect(!receiver.receiveOffload)
        try receiver.setReceiveOffload(receiveOffload)
        #expect(receiver.receiveOffload == receiveOffload)
        try receiver.bind(toPort: 0, interface: "127.0.0.1")
        try receiver.beginReceiving()
        let sender = UdpSocket(delegate: UdpRecorder())
        defer { sender.close() }
        #expect(sender.sendSegmentSize == 0)
        #expect(throws: SocketError.self) { try sender.setSendSegmentSize(70000) }
        #expect(throws: SocketError.self) { try sender.setSendSegmentSize(-1) }
        try sender.setSendSegmentSize(100)
        #expect(sender.sendSegmentSize == 100)
        let data = (0..<1000).map { UInt8($0 / 100 + 1) }
        try sender.send(data, toHost: "127.0.0.1", port: receiver.localPort)
        #expect(log.waitForReceived(10) == (0..<10).map { [UInt8](repeating: UInt8($0 + 1), count: 100) })

        receiver.maxReceiveIPv4BufferSize = 50
        try sender.send(Array(data[0..<300]), toHost: "127.0.0.1", port: receiver.localPort)
        try sender.setSendSegmentSize(0)
        try sender.send([7], toHost: "127.0.0.1", port: receiver.localPort)
        #expect(log.waitForReceived(11).last == [7])
        let truncated = log.events.filter { if case .receiveError(.truncated, _) = $0 { return true }; return false }
        #expect(truncated.count == 3)
        log.checkContract()
    }
}
