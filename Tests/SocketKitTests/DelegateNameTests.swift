// SPDX-License-Identifier: MIT
import Synchronization
import Testing
@testable import SocketKit

/// Every requirement of the four delegate protocols is reached by its exact name and by
/// nothing else: each event reaches the method implemented under the requirement's name
/// (not its default), and a delegate whose methods miss the names by a label or a type
/// (declared in the class body, where the compiler does not look for near misses) gets the
/// defaults only. Tests/compile-checks shows the compiler's warning for the same near misses
/// declared in the extension that declares the conformance, as the protocols' documentation
/// advises.
@Suite("Delegate method names")
struct DelegateNameTests {
    /// The requirement each sample event reaches (`EventTableTests.socketSamples`, plus the
    /// Unix-domain connect and the read into a caller's buffer).
    static func socketEvents(child: Socket, core: TCPSocketCore, buffer: UnsafeMutableRawBufferPointer) throws
        -> [(SocketEvent, String?)] {
        let samples = try EventTableTests.socketSamples(child: child, core: core)
        let names: [String: String] = [
            "didConnect": "socket(_:didConnectToHost:port:)",
            "didAcceptSocket": "socket(_:didAcceptNewSocket:)",
            "didNotAccept": "socket(_:didPauseAcceptingWithError:)",
            "didRead": "socket(_:didRead:withTag:)",
            "didReadPartial": "socket(_:didReadPartialDataOfLength:tag:)",
            "shouldTimeoutRead": "socket(_:shouldTimeoutReadWithTag:elapsed:bytesDone:)",
            "didWrite": "socket(_:didWriteDataWithTag:)",
            "didWritePartial": "socket(_:didWritePartialDataOfLength:tag:)",
            "shouldTimeoutWrite": "socket(_:shouldTimeoutWriteWithTag:elapsed:bytesDone:)",
            "didCloseReadStream": "socketDidCloseReadStream(_:)",
            "didSecure": "socketDidSecure(_:)",
            "didReceiveTrust": "socket(_:didReceiveTrust:completionHandler:)",
            "didReachWriteHighWatermark": "socket(_:writeQueueDidReachHighWatermark:)",
            "didDrainToWriteLowWatermark": "socket(_:writeQueueDidDrainToLowWatermark:)",
            "didDisconnect": "socketDidDisconnect(_:withError:)",
            "didCancelRead": "socket(_:didCancelReadWithTag:unreadBytes:)",
        ]
        var events = samples.map { ($0, names[EventTableTests.caseName($0)]) }
        events.append((.didConnect(peer: try SocketAddress(unixPath: "/tmp/sample")), "socket(_:didConnectToUnixPath:)"))
        events.append((.didRead(.callerBuffer(buffer, range: 0..<2), tag: 5), "socket(_:didReadInto:range:withTag:)"))
        return events
    }

    static let udpNames = [
        "didConnect": "udpSocket(_:didConnectToAddress:)", "didNotConnect": "udpSocket(_:didNotConnect:)",
        "didSend": "udpSocket(_:didSendDataWithTag:)", "didNotSend": "udpSocket(_:didNotSendDataWithTag:dueToError:)",
        "didReceive": "udpSocket(_:didReceive:fromAddress:withFilterContext:)",
        "didReceiveWithPacketInfo": "udpSocket(_:didReceive:fromAddress:packetInfo:withFilterContext:)",
        "didReceiveError": "udpSocket(_:didReceiveError:)", "didClose": "udpSocketDidClose(_:withError:)",
    ]

    /// Every event through `receiver` (as delivery calls it); the names noted for each.
    static func deliverEach(_ events: [(SocketEvent, String?)], to receiver: SwiftDelegateReceiver, on socket: Socket,
                            noted: Names) -> [(expected: String?, got: [String])] {
        events.map { event, expected in
            noted.reset()
            _ = receiver.receive(event, on: socket)
            if case .didAcceptSocket = event { _ = receiver.eventLoopForConnection(from: try! SocketAddress(ipAddress: "192.0.2.1", port: 7), on: socket) }
            return (expected, noted.take())
        }
    }

    @Test func everySocketDelegateRequirementIsReachedByItsExactNameOnly() throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 1)
        defer { buffer.deallocate() }
        let socket = Socket()
        let events = try Self.socketEvents(child: Socket(), core: Socket().core, buffer: buffer)

        let exact = ExactDelegate()
        for (expected, got) in Self.deliverEach(events, to: SwiftDelegateReceiver(exact), on: socket, noted: exact.names) {
            let accept = expected == "socket(_:didAcceptNewSocket:)"
            #expect(got == (expected.map { [$0] + (accept ? ["newEventLoop(forConnectionFrom:on:)"] : []) } ?? []))
        }
        let missed = NearMissDelegate()
        for (_, got) in Self.deliverEach(events, to: SwiftDelegateReceiver(missed), on: socket, noted: missed.names) {
            #expect(got.isEmpty, "a near miss was called: \(got)")
        }
    }

    @Test @MainActor func everyMainActorSocketDelegateRequirementIsReachedByItsExactNameOnly() throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 1)
        defer { buffer.deallocate() }
        let socket = Socket()
        let events = try Self.socketEvents(child: Socket(), core: Socket().core, buffer: buffer)

        let exact = MainActorExactDelegate()
        for (expected, got) in Self.deliverEach(events, to: SwiftDelegateReceiver(mainActor: exact), on: socket,
                                               noted: exact.names) {
            #expect(got == (expected.map { [$0] } ?? []))
        }
        let missed = MainActorNearMissDelegate()
        for (_, got) in Self.deliverEach(events, to: SwiftDelegateReceiver(mainActor: missed), on: socket,
                                        noted: missed.names) {
            #expect(got.isEmpty, "a near miss was called: \(got)")
        }
    }

    @Test @MainActor func everyUdpDelegateRequirementIsReachedByItsExactNameOnly() throws {
        let socket = UdpSocket()
        let events = try EventTableTests.udpSamples()
        let exact = UdpExactDelegate(), mainExact = MainActorUdpExactDelegate()
        let missed = UdpNearMissDelegate(), mainMissed = MainActorUdpNearMissDelegate()
        let receivers: [(SwiftUdpDelegateReceiver?, Names, Bool)] = [
            (SwiftUdpDelegateReceiver(exact), exact.names, true),
            (SwiftUdpDelegateReceiver(mainActor: mainExact), mainExact.names, true),
            (SwiftUdpDelegateReceiver(missed), missed.names, false),
            (SwiftUdpDelegateReceiver(mainActor: mainMissed), mainMissed.names, false),
        ]
        for (receiver, names, isExact) in receivers {
            let receiver = try #require(receiver)
            for event in events {
                names.reset()
                receiver.receive(event, on: socket)
                let expected = try #require(Self.udpNames[EventTableTests.caseName(event)])
                #expect(names.take() == (isExact ? [expected] : []))
            }
        }
    }
}

/// The names of the methods called, noted by `#function`.
final class Names: Sendable {
    private let noted = LockedValue<[String]>([])
    func note(_ name: String = #function) { noted.withLock { $0.append(name) } }
    func reset() { noted.withLock { $0.removeAll() } }
    func take() -> [String] { noted.withLock { $0 } }
}

final class ExactDelegate: SocketDelegate {
    let names = Names()
    func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? { names.note(); return nil }
    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) { names.note() }
    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) { names.note() }
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) { names.note() }
    func socket(_ sock: Socket, didConnectToUnixPath path: String) { names.note() }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { names.note(); return 0 }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { names.note(); return 0 }
    func socketDidCloseReadStream(_ sock: Socket) { names.note() }
    func socketDidSecure(_ sock: Socket) { names.note() }
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) { names.note() }
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) { names.note() }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) { names.note() }
}

/// Each requirement missed by one label or one type; the defaults run instead.
final class NearMissDelegate: SocketDelegate {
    let names = Names()
    func newEventLoop(forConnectionsFrom address: SocketAddress, on listener: Socket) -> EventLoop? { names.note(); return nil }
    func socket(_ listener: Socket, didAcceptNewSockets newSocket: Socket) { names.note() }
    func socket(_ listener: Socket, didPauseAcceptingWithError error: Error) { names.note() }
    func socket(_ sock: Socket, didConnectToHost host: String, port: Int) { names.note() }
    func socket(_ sock: Socket, didConnectToUnixPath path: String?) { names.note() }
    func socket(_ sock: Socket, didReadData data: [UInt8], withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Int { names.note(); return 0 }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int32) { names.note() }
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Float, bytesDone: Int) -> Double { names.note(); return 0 }
    func socketDidCloseReadStream(_ sock: Socket?) { names.note() }
    func socketDidSecure(socket: Socket) { names.note() }
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completion: @escaping @Sendable (Bool) -> Void) { names.note() }
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: UInt) { names.note() }
    func socket(_ sock: Socket, writeQueueDidDrainToLowWaterMark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unread: Int) { names.note() }
    func socketDidDisconnect(_ sock: Socket, withError error: Error?) { names.note() }
}

@MainActor
final class MainActorExactDelegate: MainActorSocketDelegate {
    let names = Names()
    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) { names.note() }
    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) { names.note() }
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) { names.note() }
    func socket(_ sock: Socket, didConnectToUnixPath path: String) { names.note() }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { names.note(); return 0 }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { names.note(); return 0 }
    func socketDidCloseReadStream(_ sock: Socket) { names.note() }
    func socketDidSecure(_ sock: Socket) { names.note() }
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) { names.note() }
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) { names.note() }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) { names.note() }
}

@MainActor
final class MainActorNearMissDelegate: MainActorSocketDelegate {
    let names = Names()
    func socket(_ listener: Socket, didAcceptNewSockets newSocket: Socket) { names.note() }
    func socket(_ listener: Socket, didPauseAcceptingWithError error: Error) { names.note() }
    func socket(_ sock: Socket, didConnectToHost host: String, port: Int) { names.note() }
    func socket(_ sock: Socket, didConnectToUnixPath path: String?) { names.note() }
    func socket(_ sock: Socket, didReadData data: [UInt8], withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, tag: Int) { names.note() }
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Int { names.note(); return 0 }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int32) { names.note() }
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, withTag tag: Int) { names.note() }
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Float, bytesDone: Int) -> Double { names.note(); return 0 }
    func socketDidCloseReadStream(_ sock: Socket?) { names.note() }
    func socketDidSecure(socket: Socket) { names.note() }
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completion: @escaping @Sendable (Bool) -> Void) { names.note() }
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: UInt) { names.note() }
    func socket(_ sock: Socket, writeQueueDidDrainToLowWaterMark queuedBytes: Int) { names.note() }
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unread: Int) { names.note() }
    func socketDidDisconnect(_ sock: Socket, withError error: Error?) { names.note() }
}

final class UdpExactDelegate: UdpSocketDelegate {
    let names = Names()
    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) { names.note() }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) { names.note() }
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) { names.note() }
}

final class UdpNearMissDelegate: UdpSocketDelegate {
    let names = Names()
    func udpSocket(_ sock: UdpSocket, didConnectTo address: SocketAddress) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotConnect error: Error) { names.note() }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int32) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveData data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveData data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: Error) { names.note() }
    func udpSocketDidClose(_ sock: UdpSocket, withError error: Error?) { names.note() }
}

@MainActor
final class MainActorUdpExactDelegate: MainActorUdpSocketDelegate {
    let names = Names()
    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) { names.note() }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) { names.note() }
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) { names.note() }
}

@MainActor
final class MainActorUdpNearMissDelegate: MainActorUdpSocketDelegate {
    let names = Names()
    func udpSocket(_ sock: UdpSocket, didConnectTo address: SocketAddress) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotConnect error: Error) { names.note() }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int32) { names.note() }
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveData data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveData data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) { names.note() }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: Error) { names.note() }
    func udpSocketDidClose(_ sock: UdpSocket, withError error: Error?) { names.note() }
}
