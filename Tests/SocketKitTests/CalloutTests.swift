// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// The re-entrancy rule: user code of a socket (a callback, a `perform` body, the
/// listener's loop hook) runs as a callout, and nothing ends the session under it. Data lent
/// to a callback stays valid until it returns, whatever the callback does.
/// A value handed between a test and a callback (the waits around it order the accesses).
final class Box<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

@Suite struct CalloutTests {
    /// The C API's view of reads: the bytes as the engine lends them (not a Swift copy).
    final class BorrowingReceiver: SocketEventReceiver, @unchecked Sendable {
        let onRead: (Socket, UnsafeRawBufferPointer, Int) -> Void
        private let lock = ConditionLock()
        private var reads = 0
        private var disconnect: SocketError?? = nil

        init(onRead: @escaping (Socket, UnsafeRawBufferPointer, Int) -> Void) {
            self.onRead = onRead
        }

        var interests: SocketEventInterests { .all }

        func receive(_ event: SocketEvent, on socket: Socket) -> Double {
            switch event {
            case .didRead(.borrowed(let bytes), let tag):
                lock.withLock { reads += 1 }
                onRead(socket, bytes, tag)
            case .didRead(.owned(let bytes), let tag):
                lock.withLock { reads += 1 }
                bytes.withUnsafeBytes { onRead(socket, $0, tag) }
            case .didDisconnect(let error):
                lock.withLock {
                    disconnect = .some(error)
                    lock.broadcast()
                }
            default:
                break
            }
            return 0
        }

        func receiverForAcceptedSocket() -> SocketEventReceiver? { self }
        func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop? { nil }

        var readCount: Int { lock.withLock { reads } }

        func waitForDisconnect(timeout: Double = 10) -> SocketError?? {
            let limit = deadline(afterSeconds: timeout)
            return lock.withLock {
                while disconnect == nil {
                    if !lock.wait(untilDeadline: limit) { break }
                }
                return disconnect
            }
        }
    }

    /// Waits (bounded) on the loop until the kernel has the peer's reset for `descriptor`.
    static func waitForHangUp(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: 0, revents: 0)
        let limit = deadline(afterSeconds: 10)
        while monotonicNanoseconds() < limit {
            if poll(&entry, 1, 100) > 0 && entry.revents & Int16(POLLHUP | POLLERR) != 0 { return true }
        }
        return false
    }

    @Test func aTLSEchoOfLentBytesSurvivesAPeerReset() throws {
        let clientGroup = EventLoopGroup(loopCount: 1)
        defer { try? clientGroup.shutdown() }
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let (client, clientRecorder) = recordedSocket("client", eventLoop: clientGroup.next())
        try client.connect(toHost: "127.0.0.1", port: rawListener.localPort, timeout: 5)
        let accepted = try rawListener.accept()

        let connectedAfterEcho = Box(-1)
        let intactAfterEcho = Box(false)
        let receiver = BorrowingReceiver { sock, bytes, tag in
            if tag == 1 {
                // The peer resets now; the second read, whose bytes wait in the prebuffer,
                // then runs with the reset already in the kernel.
                client.perform { descriptors in
                    var reset = linger(l_onoff: 1, l_linger: 0)
                    setsockopt(descriptors.primary, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
                }
                client.disconnect()
                _ = clientRecorder.waitForDisconnect()
                let hungUp = Box(false)
                sock.perform { hungUp.value = CalloutTests.waitForHangUp($0.primary) } // inline: its loop
                #expect(hungUp.value)
                return
            }
            // As the C echo example: the inline TLS send fails (the peer reset).
            try? sock.write(copying: bytes, timeout: -1, tag: 9)
            connectedAfterEcho.value = sock.isConnected ? 1 : 0
            intactAfterEcho.value = Array(bytes) == Array("pong".utf8)
        }
        let server = Socket(receiver: receiver, callbackQueue: .eventLoop, eventLoop: nil)
        try server.adopt(accepted.detach())
        try server.startTLS(TestCertificates.server())
        try server.read(toLength: 4, tag: 1)
        try server.read(toLength: 4, tag: 2)
        try client.startTLS(TestCertificates.client())
        #expect(clientRecorder.waitForSecure())
        // One record: the first read takes "ping", "pong" waits in the prebuffer.
        try client.write(bytes("pingpong"))

        let error = try #require(receiver.waitForDisconnect())
        #expect(receiver.readCount == 2)
        #expect(connectedAfterEcho.value == 1, "the session ended under the callback")
        #expect(intactAfterEcho.value)
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET || error?.osError == EPIPE)
    }

    @Test func aDisconnectInsidePerformTakesEffectAfterItReturns() throws {
        let pair = try ReadTests.RawPair()
        let disconnectedInside = Box(-1)
        let done = Latch()
        let recorder = pair.recorder
        pair.socket.perform { [socket = pair.socket] _ in
            socket.disconnect()
            // The body is user code: the delegate hears of the disconnect after it.
            disconnectedInside.value = recorder.events.contains { $0.isDisconnect } ? 1 : 0
            done.open()
        }
        #expect(done.wait())
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(disconnectedInside.value == 0)
    }
}
