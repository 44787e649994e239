// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// A receive batch (one `recvmmsg`) looks its socket's receiver up once and hands every
/// datagram of the batch straight to it (`DirectDelivery`). What a callback changes in the
/// middle of a batch must still apply from the next datagram, as when each datagram looked
/// the receiver up afresh.
///
/// The datagrams wait in the kernel before the socket starts receiving, so that its first
/// `recvmmsg` takes them all in one batch; the expectations hold however they are batched.
@Suite("UDP receive batches")
struct UdpReceiveBatchTests {
    private static let count = 10

    /// A bound socket (not receiving yet) and `datagrams` (default: `count` one-byte
    /// datagrams [0], [1], ...) sent to it and sent for good (each has its didSend).
    private func boundWithQueuedDatagrams(_ recorder: UdpRecorder, receiveLimit: Int? = nil,
                                          datagrams: [[UInt8]] = (0..<count).map { [UInt8($0)] })
        throws -> (UdpSocket, UdpSocket) {
        let server = UdpSocket(delegate: recorder)
        if let receiveLimit { server.maxReceiveIPv4BufferSize = receiveLimit }
        try server.bind(toPort: 0, interface: "127.0.0.1")
        let clientLog = UdpRecorder()
        let client = UdpSocket(delegate: clientLog)
        try client.connect(toAddress: .ipv4Loopback(port: server.localPort))
        for (index, datagram) in datagrams.enumerated() { try client.send(datagram, tag: index) }
        #expect(clientLog.wait { $0.filter { if case .sent = $0 { return true }; return false }.count == datagrams.count })
        return (server, client)
    }

    @Test func aDelegateReplacedInAReceiveCallbackGetsTheRestOfTheBatch() throws {
        let first = UdpRecorder()
        let second = UdpRecorder()
        first.onReceive = { sock, data, _ in
            if data == [2] { sock.delegate = second }
        }
        let (server, client) = try boundWithQueuedDatagrams(first)
        defer { server.close(); client.close() }
        try server.beginReceiving()
        #expect(second.waitForReceived(Self.count - 3).count == Self.count - 3)
        #expect(first.received == [[0], [1], [2]])
        #expect(second.received == (3..<Self.count).map { [UInt8($0)] })
        first.checkContract()
        second.checkContract()
    }

    @Test(arguments: [false, true])
    func aSocketReleasedInAReceiveCallbackGetsNoMoreOfTheBatch(oversizedNext: Bool) throws {
        final class Holder: @unchecked Sendable {
            var socket: UdpSocket?
            var testLetGo = false
        }
        let recorder = UdpRecorder()
        let holder = Holder()
        let letGo = ConditionLock()
        recorder.onReceive = { _, data, _ in
            // The first callback waits until the test holds no reference of its own.
            if data == [0] { letGo.withLock { while !holder.testLetGo { letGo.wait() } } }
            if data == [2] { holder.socket = nil } // the last reference outside SocketKit
        }
        let client: UdpSocket
        do {
            // With oversizedNext, the datagram after the release is over the receive limit:
            // it takes the general path (a truncation report), which must not reach the
            // dropped socket either.
            var datagrams = (0..<Self.count).map { [UInt8($0)] }
            if oversizedNext { datagrams[3] = [UInt8](repeating: 3, count: 200) }
            let (server, made) = try boundWithQueuedDatagrams(recorder, receiveLimit: oversizedNext ? 100 : nil,
                                                              datagrams: datagrams)
            client = made
            holder.socket = server
            try server.beginReceiving()
        }
        defer { client.close() }
        letGo.withLock {
            holder.testLetGo = true
            letGo.broadcast()
        }
        #expect(recorder.waitForReceived(3).count == 3)
        // Once released, a socket calls its delegate no more (the datagrams after the
        // release are dropped with it): nothing follows within a generous wait.
        #expect(!recorder.wait(timeout: 0.3) { $0.count > 3 })
        #expect(recorder.received == [[0], [1], [2]])
        recorder.checkContract()
    }
}
