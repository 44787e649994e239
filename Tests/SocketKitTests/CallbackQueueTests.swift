// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Where callbacks run: the loop, a serial queue shared by many sockets, a host-driven
/// queue; in order, never overlapping, `socketDidDisconnect` last; and the synchronous
/// delegate change.
@Suite("Callback queues")
struct CallbackQueueTests {
    @Test func eventLoopCallbacksRunOnTheSocketsLoop() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read()
        try pair.peer.send("x")
        #expect(pair.recorder.waitForBytes(1) == [0x78])
        #expect(pair.recorder.callbacksOnLoopThread == pair.recorder.events.count)
    }

    @Test func aSerialQueueSharedByManySocketsNeverOverlapsAndKeepsOrder() throws {
        let queue = try SerialCallbackQueue(name: "shared-callbacks")
        let listenerRecorder = Recorder("listener")
        let serverRecorder = Recorder("servers")
        listenerRecorder.onAccept = { _, child in
            child.setDelegate(serverRecorder, callbackQueue: queue)
            try? child.read(toData: Socket.lf)
        }
        serverRecorder.onRead = { sock, data, _ in
            try? sock.write(data)
            try? sock.read(toData: Socket.lf)
        }
        let listener = Socket(delegate: listenerRecorder, callbackQueue: queue)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        // One recorder serves every client, on one queue: no two callbacks may overlap.
        let clientRecorder = Recorder("clients")
        var clients: [Socket] = []
        for index in 0..<20 {
            let client = Socket(delegate: clientRecorder, callbackQueue: queue)
            try client.connect(toHost: "127.0.0.1", port: listener.localPort)
            for line in 0..<10 {
                try client.write(bytes("client \(index) line \(line)\n"))
                try client.read(toData: Socket.lf, tag: index * 100 + line)
            }
            clients.append(client)
        }
        #expect(clientRecorder.wait(timeout: 20) { $0.filter { if case .read = $0 { return true }; return false }.count == 200 })
        #expect(clientRecorder.overlappingCallbacks == 0)
        #expect(serverRecorder.overlappingCallbacks == 0)
        #expect(clientRecorder.callbackThreads.count == 1, "every callback ran on the queue's one thread")
        #expect(clientRecorder.callbacksOnLoopThread == 0)
        for index in 0..<20 {
            let tags = clientRecorder.reads().map(\.tag).filter { $0 / 100 == index }
            #expect(tags == (0..<10).map { index * 100 + $0 }, "client \(index)'s reads complete in order")
        }
        for client in clients { client.disconnect() }
        #expect(clientRecorder.wait { $0.filter(\.isDisconnect).count == 20 })
        #expect(clientRecorder.callbacksAfterDisconnect == 0)
    }

    @Test func aHostQueueHoldsCallbacksUntilDrainedAndItsDescriptorSaysSo() throws {
        let queue = try HostCallbackQueue()
        func readable() -> Bool {
            var descriptor = pollfd(fd: queue.fileDescriptor, events: Int16(POLLIN), revents: 0)
            return poll(&descriptor, 1, 0) == 1
        }
        func waitReadable() -> Bool {
            var descriptor = pollfd(fd: queue.fileDescriptor, events: Int16(POLLIN), revents: 0)
            return poll(&descriptor, 1, 10_000) == 1
        }
        #expect(!readable())
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let recorder = Recorder()
        let drainingThread = currentThreadIdentity()
        let ranHere = Atomic<Int>(0)
        recorder.onConnect = { _ in if currentThreadIdentity() == drainingThread { ranHere.add(1, ordering: .relaxed) } }
        recorder.onRead = { _, _, _ in if currentThreadIdentity() == drainingThread { ranHere.add(1, ordering: .relaxed) } }
        let socket = Socket(delegate: recorder, callbackQueue: queue)
        try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        try socket.read(toLength: 3, tag: 1)
        try peer.send("abc")
        // Nothing runs until we drain.
        #expect(waitReadable())
        #expect(!recorder.wait(timeout: 0.2) { !$0.isEmpty })
        var ran = 0
        while ran < 2 {
            #expect(waitReadable())
            ran += queue.drain()
        }
        #expect(ran == 2)
        #expect(!readable(), "the descriptor is readable only while callbacks are pending")
        #expect(!queue.hasPendingCallbacks)
        #expect(recorder.events == [.connected(host: "127.0.0.1", port: rawListener.localPort), .read(bytes("abc"), tag: 1)])
        #expect(ranHere.load(ordering: .relaxed) == 2)

        socket.disconnect()
        #expect(waitReadable())
        #expect(queue.drain(maxCallbacks: 1) == 1)
        #expect(recorder.events.last == .disconnected(nil))
        #expect(!readable())
    }

    @Test func changingTheCallbackQueueMidStreamKeepsOrder() throws {
        let first = try SerialCallbackQueue(name: "first")
        let second = try SerialCallbackQueue(name: "second")
        let pair = try ReadTests.RawPair()
        pair.socket.callbackQueue = first
        let count = 300
        for tag in 0..<count { try pair.socket.read(toLength: 1, tag: tag) }
        let payload = pattern(count)
        for (index, byte) in payload.enumerated() {
            try pair.peer.send([byte])
            if index == count / 3 { pair.socket.callbackQueue = second }
            if index == 2 * count / 3 { pair.socket.callbackQueue = .eventLoop }
        }
        #expect(pair.recorder.waitForBytes(count) == payload)
        #expect(pair.recorder.reads().map(\.tag) == Array(0..<count))
        #expect(pair.recorder.overlappingCallbacks == 0)
    }

    @Test func settingTheDelegateIsSynchronous() throws {
        let queue = try SerialCallbackQueue()
        let pair = try ReadTests.RawPair()
        let slow = Recorder("slow")
        let inCallback = Atomic<Bool>(false)
        let release = ConditionLock()
        var released = false
        slow.onRead = { _, _, _ in
            inCallback.store(true, ordering: .releasing)
            release.withLock { while !released { release.wait() } }
        }
        pair.socket.setDelegate(slow, callbackQueue: queue)
        try pair.socket.read(tag: 1)
        try pair.peer.send("a")
        #expect(slow.wait { !$0.isEmpty })
        // A callback is running on the queue's thread: replacing the delegate waits for it.
        let replaced = Atomic<Bool>(false)
        let replacement = Recorder("replacement")
        let socket = pair.socket
        _ = try PosixThread.spawnDetached(name: "replacer") {
            socket.delegate = replacement
            replaced.store(true, ordering: .releasing)
            slow.notify()
        }
        #expect(!slow.wait(timeout: 0.2) { _ in replaced.load(ordering: .acquiring) })
        release.withLock {
            released = true
            release.broadcast()
        }
        #expect(slow.wait { _ in replaced.load(ordering: .acquiring) })
        try pair.socket.read(tag: 2)
        try pair.peer.send("b")
        #expect(replacement.waitForBytes(1) == bytes("b"))
        #expect(slow.reads().map(\.tag) == [1], "nothing reaches the old delegate after the setter returns")
        let ranFirstCallback = inCallback.load(ordering: .acquiring)
        #expect(ranFirstCallback)
    }

    @Test func callbacksOfASocketWithoutDelegateAreDropped() throws {
        let pair = try ReadTests.RawPair()
        pair.socket.delegate = nil
        try pair.socket.read(tag: 1)
        try pair.peer.send("dropped")
        pair.socket.disconnectAfterReading()
        #expect(try pair.peer.receiveUntilEndOfStream().isEmpty)
        #expect(pair.recorder.reads().isEmpty)
    }
}
