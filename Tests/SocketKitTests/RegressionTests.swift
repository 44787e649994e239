// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Bugs found in review, each with the test that would have caught it.
@Suite("Regressions")
struct RegressionTests {
    @Test func hugeLengthsAreRefusedAndNeverReservedUpFront() throws {
        let pair = try ReadTests.RawPair()
        let refused = #expect(throws: SocketError.self) { try pair.socket.read(toLength: 1 << 44) }
        #expect(refused?.code == .badParam)
        // Even when allowed, nothing is reserved before it arrives (this used to abort).
        try pair.socket.setMaximumReadLength(Int.max / 4)
        try pair.socket.read(toLength: 1 << 44, tag: 1)
        try pair.peer.send("x")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 1, tag: 1)) })
        #expect(pair.socket.isConnected)
    }

    @Test func aPeerThatAnswersAndClosesAtOnceIsSeenToClose() throws {
        // The single edge that completes the connect also carries the peer's data and FIN:
        // hold the loop while all of that happens, inside a task on it (another socket's:
        // a connect made in the client's own perform would wait for it to return).
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let (client, recorder) = recordedSocket(eventLoop: group.next())
        let holder = Socket(eventLoop: client.eventLoop)
        let connectIssued = Latch()
        let peerDone = Latch()
        let port = rawListener.localPort
        holder.perform { _ in
            try? client.connect(toHost: "127.0.0.1", port: port, timeout: 5)
            try? client.read(toLength: 5, timeout: 5, tag: 1)
            try? client.read(timeout: 5, tag: 2)
            connectIssued.open()
            peerDone.wait()
        }
        #expect(connectIssued.wait())
        let peer = try rawListener.accept()
        try peer.send("hello")
        peer.close()
        peerDone.open()
        let error = try #require(recorder.waitForDisconnect())
        #expect(recorder.reads().map(\.bytes) == [bytes("hello")])
        #expect(error?.code == .closed, "the FIN that came with the connect must not be lost (got \(String(describing: error)))")
    }

    @Test(.timeLimit(.minutes(1)))
    func releasingEachOthersSocketsFromCallbacksDoesNotDeadlock() throws {
        // No shutdown on failure: joining deadlocked loops would hang the whole run.
        let group = EventLoopGroup(loopCount: 2)
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let (first, firstRecorder) = recordedSocket("first", eventLoop: group.loops[0])
        let (second, secondRecorder) = recordedSocket("second", eventLoop: group.loops[1])
        try first.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let firstPeer = try rawListener.accept()
        try second.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let secondPeer = try rawListener.accept()
        defer { firstPeer.close(); secondPeer.close() }
        // Both callbacks run at once, then each replaces the other socket's delegate.
        let arrived = Atomic<Int>(0)
        let bothInside = Latch()
        let returned = Atomic<Int>(0)
        let bothReturned = Latch()
        func crossOver(_ other: Socket) -> (Socket, [UInt8], Int) -> Void {
            { [weak other] _, _, _ in
                if arrived.add(1, ordering: .acquiringAndReleasing).newValue == 2 { bothInside.open() }
                bothInside.wait()
                other?.delegate = nil
                if returned.add(1, ordering: .acquiringAndReleasing).newValue == 2 { bothReturned.open() }
            }
        }
        firstRecorder.onRead = crossOver(second)
        secondRecorder.onRead = crossOver(first)
        try first.read()
        try second.read()
        try firstPeer.send("a")
        try secondPeer.send("b")
        let finished = bothReturned.wait(timeout: 10)
        #expect(finished, "the two callbacks deadlocked")
        if finished {
            first.disconnect()
            second.disconnect()
            try? group.shutdown()
        }
        withExtendedLifetime((first, second)) {}
    }

    /// Records (event, socket) pairs so the order per accepted socket can be checked.
    final class AcceptOrder: SocketDelegate, @unchecked Sendable {
        let lock = Lock()
        var log: [(String, ObjectIdentifier)] = []
        var children: [Socket] = []
        let hookCalls = Atomic<Int>(0)
        let calls = ConditionLock()

        func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? {
            hookCalls.add(1, ordering: .relaxed)
            calls.withLock { calls.broadcast() }
            return nil
        }
        func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
            lock.withLock {
                children.append(newSocket)
                log.append(("accept", ObjectIdentifier(newSocket)))
            }
        }
        func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
            lock.withLock { log.append(("disconnect", ObjectIdentifier(sock))) }
        }
        func waitForHookCalls(_ count: Int) -> Bool {
            let limit = deadline(afterSeconds: 10)
            return calls.withLock {
                while hookCalls.load(ordering: .relaxed) < count {
                    if !calls.wait(untilDeadline: limit) { return false }
                }
                return true
            }
        }
    }

    @Test func aChildsCallbacksNeverPrecedeItsDidAccept() throws {
        let queue = try HostCallbackQueue()
        let delegate = AcceptOrder()
        let listener = Socket(delegate: delegate, callbackQueue: queue)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let first = try RawSocket.connect(port: listener.localPort)
        defer { first.close() }
        let second = try RawSocket.connect(port: listener.localPort)
        #expect(delegate.waitForHookCalls(2))
        second.reset()
        // A third accept means the loop has also seen the second connection's reset.
        let third = try RawSocket.connect(port: listener.localPort)
        defer { third.close() }
        #expect(delegate.waitForHookCalls(3))
        // Drain one callback at a time, as a host would.
        var idle = 0
        while idle < 3 {
            var descriptor = pollfd(fd: queue.fileDescriptor, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 200) == 0 { idle += 1; continue }
            _ = queue.drain(maxCallbacks: 1)
        }
        let log = delegate.lock.withLock { delegate.log }
        for (index, entry) in log.enumerated() where entry.0 == "disconnect" && entry.1 != ObjectIdentifier(listener) {
            let acceptedAt = log.firstIndex { $0.0 == "accept" && $0.1 == entry.1 }
            #expect(acceptedAt != nil && acceptedAt! < index, "a child's callback came before its didAccept: \(log)")
        }
        #expect(log.filter { $0.0 == "accept" }.count == 3)
    }

    @Test func theNewLoopHookRunsUnderTheGate() throws {
        final class SlowHook: SocketDelegate, @unchecked Sendable {
            let entered = Latch()
            let proceed = Latch()
            func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? {
                entered.open()
                proceed.wait()
                return nil
            }
        }
        let hook = SlowHook()
        let listener = Socket(delegate: hook)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        #expect(hook.entered.wait())
        let replaced = Latch()
        _ = try PosixThread.spawnDetached(name: "replacer") {
            listener.delegate = nil
            replaced.open()
        }
        #expect(!replaced.wait(timeout: 0.2), "the setter returned while the hook was still running")
        hook.proceed.open()
        #expect(replaced.wait())
    }

    @Test func aListenerRestartedInsideDidAcceptDoesNotAcceptOnItsOldDescriptor() throws {
        let recorder = Recorder()
        let listener = Socket(delegate: recorder)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let restarted = Latch()
        recorder.onAccept = { sock, _ in
            sock.disconnect()
            #expect(throws: Never.self) { try sock.accept(onInterface: "127.0.0.1", port: 0) }
            restarted.open()
        }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        #expect(restarted.wait())
        #expect(!recorder.wait(timeout: 0.3) { $0.contains { if case .pausedAccepting = $0 { return true }; return false } },
                "\(recorder.events)")
        #expect(listener.isAccepting)
    }

    /// Sanitizer run (LeakSanitizer): the drain job a socket enqueued on a host queue held the
    /// socket strongly, and the socket holds its queue, so a socket dropped while a callback
    /// waited undrained was never freed and its connection stayed open.
    @Test func aSocketDroppedWhileItsCallbackWaitsInAHostQueueIsFreedAndClosed() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let queue = try HostCallbackQueue()
        let recorder = Recorder("dropped")
        weak var weakSocket: Socket?
        let peer: RawSocket
        do {
            let socket = Socket(delegate: recorder, callbackQueue: queue)
            try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort)
            peer = try rawListener.accept()
            var descriptor = pollfd(fd: queue.fileDescriptor, events: Int16(POLLIN), revents: 0)
            #expect(poll(&descriptor, 1, 10_000) == 1, "didConnect is waiting in the host queue")
            weakSocket = socket
        }
        defer { peer.close() }
        #expect(try peer.receiveUntilEndOfStream(timeout: 10).isEmpty, "the peer sees the connection closed")
        #expect(weakSocket == nil, "nothing keeps a dropped socket alive")
        #expect(queue.drain() == 0, "no callback runs for a socket nobody holds")
        #expect(recorder.events.isEmpty)
    }
}
