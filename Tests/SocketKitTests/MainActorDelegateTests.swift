// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// The calling thread's name. The main actor is not the main thread on Linux: once an async
/// main has suspended, libdispatch serves the main queue from a thread of its pool, one job
/// at a time. What a main-actor callback must not be on is one of SocketKit's threads.
func currentThreadName() -> String {
    let descriptor = open("/proc/thread-self/comm", O_RDONLY)
    guard descriptor >= 0 else { return "?" }
    defer { close(descriptor) }
    var name = [UInt8](repeating: 0, count: 64)
    let count = read(descriptor, &name, name.count)
    return String(decoding: name.prefix(max(0, count)), as: UTF8.self)
}

/// True unless the calling thread is one of SocketKit's (a loop, a callback queue).
func offSocketKitThreads() -> Bool { !currentThreadName().hasPrefix("socketkit") }

/// A main-actor delegate for both socket kinds that notes what it is told, checking at each
/// call that it runs on the main actor, and lets a test wait (bounded) for a condition.
@MainActor
final class MainScreen: MainActorSocketDelegate, MainActorUdpSocketDelegate {
    var events: [String] = []
    var accepted: [Socket] = []
    var everyCallOnMain = true
    /// Echo what is read, line by line (the server side).
    var echoes = false
    private var waiter: (condition: (MainScreen) -> Bool, continuation: CheckedContinuation<Bool, Never>)?

    private func note(_ event: String) {
        // Stops the test (not a race) if a callback ran elsewhere.
        MainActor.assertIsolated("a main-actor delegate's callback off the main actor")
        everyCallOnMain = everyCallOnMain && offSocketKitThreads()
        events.append(event)
        if let waiter, waiter.condition(self) {
            self.waiter = nil
            waiter.continuation.resume(returning: true)
        }
    }

    /// Waits until `condition` holds, at most `seconds`; false on timeout.
    func wait(seconds: Int = 10, until condition: @escaping (MainScreen) -> Bool) async -> Bool {
        if condition(self) { return true }
        let deadline = Task { @MainActor [weak self] in
            try? await Task.sleep(for: .seconds(seconds))
            guard !Task.isCancelled, let self, let waiter = self.waiter else { return }
            self.waiter = nil
            waiter.continuation.resume(returning: false)
        }
        defer { deadline.cancel() }
        return await withCheckedContinuation { waiter = (condition, $0) }
    }

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        accepted.append(newSocket)
        try? newSocket.read(toData: Socket.lf)
        note("accept")
    }
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) { note("connect") }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        if echoes {
            try? sock.write(data)
            try? sock.read(toData: Socket.lf)
        }
        note("read " + String(decoding: data.filter { $0 != 0x0A }, as: UTF8.self))
    }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) { note("write") }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) { note("disconnect \(error?.code.name ?? "nil")") }

    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        note("datagram " + String(decoding: data, as: UTF8.self))
    }
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) { note("sent") }
}

/// `@preconcurrency` conformance to the nonisolated protocol: compiles (see
/// Tests/compile-checks), and runs when its callbacks are on the main actor.
@MainActor
final class PreconcurrencyScreen: @preconcurrency SocketDelegate {
    let (connected, signal) = AsyncStream.makeStream(of: Bool.self)
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        MainActor.assertIsolated()
        signal.yield(offSocketKitThreads())
    }
}

/// The first element of `stream`, or nil when none came within `seconds`.
func first<Element: Sendable>(of stream: AsyncStream<Element>, within seconds: Int = 10) async -> Element? {
    await withTaskGroup(of: Element?.self) { group in
        group.addTask {
            for await element in stream { return element }
            return nil
        }
        group.addTask {
            try? await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let result = await group.next() ?? nil
        group.cancelAll()
        return result
    }
}

@Suite("Main-actor delegates")
@MainActor
struct MainActorDelegateTests {
    @Test func mainActorDelegatesRunOnTheMainActor() async throws {
        let server = MainScreen()
        server.echoes = true
        let listener = Socket(delegate: server)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        #expect(listener.callbackQueue === CallbackQueue.mainActor)
        #expect(listener.mainActorDelegate === server && listener.delegate == nil)

        let client = MainScreen()
        let socket = Socket(delegate: client)
        try socket.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
        try socket.write(bytes("hello\n"), tag: 1)
        try socket.read(toData: Socket.lf)
        #expect(await client.wait { $0.events.contains("read hello") })
        #expect(client.events == ["connect", "write", "read hello"])
        #expect(await server.wait { $0.events.contains("write") })
        #expect(server.events == ["accept", "read hello", "write"])
        // The accepted connection has the listener's delegate and its callbacks on the main actor.
        #expect(server.accepted.first?.callbackQueue === CallbackQueue.mainActor)
        socket.disconnect()
        #expect(await server.wait { $0.events.contains("disconnect closed") })
        #expect(client.events.last == "disconnect nil")
        #expect(server.everyCallOnMain && client.everyCallOnMain)
    }

    @Test func aQueueSetMeanwhileWaitsBehindThePin() async throws {
        let screen = MainScreen()
        let listener = Socket(delegate: screen)
        listener.callbackQueue = .eventLoop
        #expect(listener.callbackQueue === CallbackQueue.mainActor, "pinned while the main-actor delegate is set")
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let peer = try RawSocket.connect(port: listener.localPort)
        defer { peer.close() }
        #expect(await screen.wait { $0.events.contains("accept") })
        #expect(screen.everyCallOnMain)

        let (recorder, queue) = (Recorder("after"), try SerialCallbackQueue())
        listener.delegate = recorder
        #expect(listener.callbackQueue === CallbackQueue.eventLoop, "the queue chosen meanwhile applies once unpinned")
        listener.setDelegate(recorder, callbackQueue: queue)
        listener.setDelegate(screen)
        #expect(listener.callbackQueue === CallbackQueue.mainActor)
        listener.mainActorDelegate = nil
        #expect(listener.callbackQueue === queue, "the queue from before the pin")
    }

    @Test func mainActorUdpDelegateRunsOnTheMainActor() async throws {
        let screen = MainScreen()
        let receiver = UdpSocket(delegate: screen)
        try receiver.bind(toPort: 0, interface: "127.0.0.1")
        try receiver.beginReceiving()
        defer { receiver.close() }
        #expect(receiver.mainActorDelegate === screen && receiver.delegate == nil)
        let sender = UdpSocket(delegate: screen)
        try sender.send(bytes("ping"), toHost: "127.0.0.1", port: receiver.localPort, tag: 3)
        defer { sender.close() }
        #expect(await screen.wait { $0.events.contains("datagram ping") && $0.events.contains("sent") })
        #expect(screen.everyCallOnMain)
    }

    @Test func preconcurrencyConformanceRunsOnTheMainActorQueue() async throws {
        let peer = try RawSocket.listen()
        defer { peer.close() }
        let screen = PreconcurrencyScreen()
        let socket = Socket(delegate: screen, callbackQueue: .mainActor)
        try socket.connect(toHost: "127.0.0.1", port: peer.localPort, timeout: 5)
        defer { socket.disconnect() }
        #expect(await first(of: screen.connected) == true, "connected, on the main thread")
    }
}
