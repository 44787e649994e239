// SPDX-License-Identifier: MIT
import Testing
@testable import SocketKit

/// The memory a connection's objects take from the heap, against the figures they had when
/// this test was written (bench/README.md, "Speed tricks"): a change that grows them (a
/// field that breaks `TCPSocketCore`'s packing, a word that becomes an allocation) fails
/// here and says how much. A change meant to cost more memory sets the new figure here and
/// says why in its commit message; a smaller figure is welcome.
@Suite("Memory per connection")
struct ConnectionFootprintTests {
    @Test func aConnectionsObjectsTakeNoMoreHeapThanBefore() {
        let socket = Socket()
        let datagrams = UdpSocket()
        let limits: [(String, AnyObject, Int)] = [
            ("Socket", socket, 88),
            ("TCPSocketCore", socket.core, 360),
            ("TCPSocketCore.OutOfLineState", TCPSocketCore.OutOfLineState(), 200),
            ("UdpSocket", datagrams, 104),
            ("UDPSocketCore", datagrams.core, 536),
        ]
        // The metadata read is right: a class of a header, an Int and a byte is 25 bytes.
        final class Probe { var word = 1; var byte: UInt8 = 2 }
        #expect(ConnectionFootprint.instanceSize(of: Probe.self) == 25)
        #expect(ConnectionFootprint.heapBytes(of: Probe()) == 40)
        for (name, object, limit) in limits {
            let bytes = ConnectionFootprint.heapBytes(of: object)
            #expect(bytes <= limit, "\(name) takes \(bytes) bytes of heap, more than its \(limit)")
        }
    }
}
