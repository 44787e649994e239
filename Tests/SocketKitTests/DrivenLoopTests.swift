// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Runs a driven group on the calling thread until `done` holds: waits (bounded) for its
/// descriptor, then runs iterations while work is left. False on timeout.
private func drive(_ group: EventLoopGroup, timeout: Double = 10, until done: () -> Bool) throws -> Bool {
    let limit = deadline(afterSeconds: timeout)
    while !done() {
        guard monotonicNanoseconds() < limit else { return false }
        var poller = pollfd(fd: group.backendDescriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&poller, 1, 100)
        while try group.runOnce() {}
    }
    return true
}

/// Waits for the driven group's descriptor alone (no iterations), up to `seconds`: true
/// when it became readable.
private func descriptorBecomesReadable(_ group: EventLoopGroup, within seconds: Int32) -> Bool {
    var poller = pollfd(fd: group.backendDescriptor, events: Int16(POLLIN), revents: 0)
    return poll(&poller, 1, seconds * 1000) == 1 && poller.revents & Int16(POLLIN) != 0
}

/// The error code of the recorder's last event if it is a disconnect.
private func disconnectCode(_ recorder: Recorder) -> SocketError.Code? {
    if case .disconnected(let error)? = recorder.events.last { return error?.code }
    return nil
}

/// A driven group (EventLoopGroup.driven()): no thread of its own; the thread that made it
/// runs it when its descriptor is readable, as a host's poll loop would (asyncio, GLib).
@Suite("Driven event loops")
struct DrivenLoopTests {
    /// Listener, client and accepted connection all on one driven group, echoing.
    private final class EchoSetup {
        let group = EventLoopGroup.driven()
        let listenerRecorder = Recorder("listener")
        let serverRecorder = Recorder("server")
        let clientRecorder = Recorder("client")
        let listener: Socket
        let client: Socket

        init() throws {
            listener = Socket(delegate: listenerRecorder, eventLoop: group.next())
            let serverRecorder = self.serverRecorder
            listenerRecorder.onAccept = { _, connection in
                connection.setDelegate(serverRecorder, callbackQueue: .eventLoop)
                try? connection.read(tag: 1)
            }
            serverRecorder.onRead = { sock, data, _ in
                try? sock.write(data)
                try? sock.read(tag: 1)
            }
            try listener.accept(onInterface: "127.0.0.1", port: 0)
            client = Socket(delegate: clientRecorder, eventLoop: group.next())
            try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 10)
        }

        var clientReceived: [UInt8] {
            clientRecorder.events.flatMap { event -> [UInt8] in if case .read(let bytes, _) = event { return bytes }; return [] }
        }
    }

    @Test func aDrivenGroupServesConnectionsOnTheThreadThatRunsIt() throws {
        let setup = try EchoSetup()
        #expect(setup.group.isDriven)
        #expect(setup.group.loops.count == 1)
        #expect(setup.group.next().inEventLoop, "the creating thread is the loop thread")
        #expect(try drive(setup.group) { setup.clientRecorder.events.contains { if case .connected = $0 { return true }; return false } })
        // Work queued by the host thread between iterations makes the descriptor readable.
        while try setup.group.runOnce() {}
        try setup.client.write(Array("first\n".utf8))
        try setup.client.read(toLength: 6, tag: 0)
        #expect(descriptorBecomesReadable(setup.group, within: 10), "a read queued between iterations did not wake the host")
        #expect(try drive(setup.group) { setup.clientReceived.count == 6 })
        var expected: [UInt8] = Array("first\n".utf8)
        for round in 0..<50 {
            let message = Array("message \(round)\n".utf8)
            expected += message
            try setup.client.write(message)
            try setup.client.read(toLength: message.count, tag: round)
            #expect(try drive(setup.group) { setup.clientReceived.count == expected.count })
        }
        #expect(setup.clientReceived == expected)
        let me = currentThreadIdentity()
        #expect(setup.serverRecorder.callbackThreads == [me])
        #expect(setup.clientRecorder.callbackThreads == [me])
        try setup.group.shutdown()
    }

    @Test func timersWakeTheDescriptor() throws {
        // Nothing to read: only the read's timer can make the descriptor readable.
        let setup = try EchoSetup()
        #expect(try drive(setup.group) { setup.clientRecorder.events.contains { if case .connected = $0 { return true }; return false } })
        while try setup.group.runOnce() {}
        try setup.client.read(timeout: 0.2, tag: 5)
        while try setup.group.runOnce() {}
        #expect(descriptorBecomesReadable(setup.group, within: 10), "the read timeout did not wake the descriptor")
        #expect(try drive(setup.group) { setup.clientRecorder.events.contains { $0.isDisconnect } })
        #expect(setup.clientRecorder.events.contains { if case .readTimeout(tag: 5, _, _) = $0 { return true }; return false })
        #expect(disconnectCode(setup.clientRecorder) == .readTimeout)
        try setup.group.shutdown()
    }

    @Test func callsFromAnotherThreadWakeTheDescriptor() throws {
        let setup = try EchoSetup()
        #expect(try drive(setup.group) { setup.clientRecorder.events.contains { if case .connected = $0 { return true }; return false } })
        while try setup.group.runOnce() {}
        let client = UncheckedSendable(setup.client)
        let other = try PosixThread.spawn(name: "writer") {
            try? client.value.write(Array("from another thread".utf8))
            try? client.value.read(toLength: 19, tag: 3)
        }
        PosixThread.join(other)
        #expect(descriptorBecomesReadable(setup.group, within: 10), "a call from another thread did not wake the descriptor")
        #expect(try drive(setup.group) { setup.clientReceived == Array("from another thread".utf8) })
        try setup.group.shutdown()
    }

    @Test func onlyTheCreatingThreadRunsItAndNeverFromInsideAnIteration() throws {
        let group = EventLoopGroup.driven()
        let wrongThread = Atomic<Int>(0)
        let other = try PosixThread.spawn(name: "intruder") {
            do throws(SocketError) { _ = try group.runOnce() } catch { if error.code == .badConfig { wrongThread.store(1, ordering: .relaxed) } }
        }
        PosixThread.join(other)
        #expect(wrongThread.load(ordering: .relaxed) == 1)

        // From a callback of an iteration (a callback on the loop queue).
        let recorder = Recorder("nested")
        let nested = Atomic<Int>(0)
        recorder.onConnect = { _ in
            do throws(SocketError) { _ = try group.runOnce() } catch { if error.code == .badConfig { nested.store(1, ordering: .relaxed) } }
        }
        let listenerRecorder = Recorder("listener") // delegates are held weakly
        let listener = Socket(delegate: listenerRecorder, eventLoop: group.next())
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        let client = Socket(delegate: recorder, eventLoop: group.next())
        try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 10)
        #expect(try drive(group) { nested.load(ordering: .relaxed) == 1 })
        withExtendedLifetime(listenerRecorder) {}

        // A group with threads has no descriptor and cannot be run by hand.
        let threaded = EventLoopGroup(loopCount: 1)
        #expect(threaded.backendDescriptor == -1)
        #expect(throws: SocketError.self) { _ = try threaded.runOnce() }
        try threaded.shutdown()
        try group.shutdown()
    }

    @Test func shuttingDownOnItsThreadClosesEverySocketAtOnce() throws {
        let setup = try EchoSetup()
        #expect(try drive(setup.group) { setup.serverRecorder.events.count > 0 || setup.clientRecorder.events.contains { if case .connected = $0 { return true }; return false } })
        try setup.group.shutdown()
        // No iteration needed: the sockets were closed and told, on this thread, in shutdown.
        #expect(disconnectCode(setup.clientRecorder) == .badConfig)
        #expect(disconnectCode(setup.listenerRecorder) == .badConfig)
        #expect(throws: SocketError.self) { try setup.client.write([1]) }
        #expect(try setup.group.runOnce() == false)
    }

    @Test func aTimerArmedBetweenIterationsWakesTheDescriptor() throws {
        // Regression: the timer descriptor was armed only at the end of an iteration, so a
        // timeout set by the host between iterations (a connect from asyncio) never fired.
        let group = EventLoopGroup.driven()
        let loop = group.next()
        let fired = Atomic<Int>(0)
        let timer = LoopTimer { fired.store(1, ordering: .relaxed) }
        loop.schedule(timer, deadline: deadline(afterSeconds: 0.1))
        #expect(descriptorBecomesReadable(group, within: 10), "the timer did not wake the descriptor")
        #expect(try drive(group) { fired.load(ordering: .relaxed) == 1 })
        try group.shutdown()
    }

    @Test func aShutdownFromACallbackFinishesInTheNextIteration() throws {
        // Regression: it was lost (the stop was marked done but never ran).
        let setup = try EchoSetup()
        let group = setup.group
        setup.clientRecorder.onConnect = { _ in try? group.shutdown() }
        #expect(try drive(setup.group) { setup.clientRecorder.events.contains { $0.isDisconnect } })
        #expect(disconnectCode(setup.clientRecorder) == .badConfig)
        #expect(try setup.group.runOnce() == false)
        // The host thread is no longer the loop's thread: calls fail instead of running inline.
        #expect(!setup.group.next().inEventLoop)
        #expect(throws: SocketError.self) {
            try Socket(delegate: setup.clientRecorder, eventLoop: group.next()).connect(toHost: "127.0.0.1", port: 9)
        }
    }
}
