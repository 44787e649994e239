// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A listener, a client connected to it, and the accepted server side, each with its own
/// recorder. The server socket gets its recorder inside `didAccept`, before any of its
/// callbacks can run.
final class Pair: @unchecked Sendable {
    let listener: Socket
    let listenerRecorder = Recorder("listener")
    let client: Socket
    let clientRecorder = Recorder("client")
    let server: Socket
    let serverRecorder = Recorder("server")

    init(host: String = "127.0.0.1", clientQueue: CallbackQueue = .eventLoop,
         serverQueue: CallbackQueue = .eventLoop, configureClient: (Socket) throws -> Void = { _ in },
         configureListener: (Socket) throws -> Void = { _ in }) throws {
        listener = Socket(delegate: listenerRecorder)
        try configureListener(listener)
        let serverRecorder = self.serverRecorder
        listenerRecorder.onAccept = { _, newSocket in
            newSocket.setDelegate(serverRecorder, callbackQueue: serverQueue)
        }
        try listener.accept(onInterface: host, port: 0)
        client = Socket(delegate: clientRecorder, callbackQueue: clientQueue)
        try configureClient(client)
        try client.connect(toHost: host, port: listener.localPort, timeout: 10)
        guard clientRecorder.waitForConnect() else { throw TestFailure("client did not connect: \(clientRecorder.events)") }
        guard let accepted = listenerRecorder.waitForAccepted(1).first else { throw TestFailure("nothing accepted") }
        server = accepted
    }

    func close() {
        client.disconnect()
        server.disconnect()
        listener.disconnect()
    }
}

/// A plain blocking socket made with the system calls directly: a peer SocketKit did not
/// write. Every wait is bounded. Closing is idempotent: a descriptor number closed twice
/// could belong to another test by the second time.
final class RawSocket: @unchecked Sendable {
    private(set) var fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    static func connect(to host: String = "127.0.0.1", port: UInt16) throws -> RawSocket {
        let address = try SocketAddress(ipAddress: host, port: port)
        let fd = socket(address.posixFamily, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(errno)") }
        let result = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        guard result == 0 else {
            let error = errno
            Glibc.close(fd)
            throw TestFailure("connect to \(address): \(String(cString: strerror(error)))")
        }
        return RawSocket(fd: fd)
    }

    /// A TCP socket bound to `host`:`port` and not listening: connections to it are refused,
    /// and, bound without SO_REUSEADDR, it keeps any other socket off its port while it is
    /// open (a port merely found free may be taken by a test running in parallel, whose
    /// listener then accepts the connection meant to be refused).
    static func boundNotListening(host: String = "127.0.0.1", port: UInt16 = 0) throws -> RawSocket {
        try bound(host: host, port: port, reuseAddress: false, ipv6Only: true)
    }

    static func listen(host: String = "127.0.0.1", port: UInt16 = 0, backlog: Int32 = 64,
                       ipv6Only: Bool = true) throws -> RawSocket {
        let socket = try bound(host: host, port: port, reuseAddress: true, ipv6Only: ipv6Only)
        guard Glibc.listen(socket.fd, backlog) == 0 else { throw TestFailure("listen: \(errno)") }
        return socket
    }

    private static func bound(host: String, port: UInt16, reuseAddress: Bool, ipv6Only: Bool) throws -> RawSocket {
        let address = try SocketAddress(ipAddress: host, port: port)
        let fd = socket(address.posixFamily, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(errno)") }
        var one: Int32 = 1
        if reuseAddress {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        if address.family == .ipv6 && ipv6Only {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        guard address.withSockAddr({ Glibc.bind(fd, $0, $1) }) == 0 else {
            let error = errno
            Glibc.close(fd)
            throw TestFailure("bind \(address): \(String(cString: strerror(error)))")
        }
        return RawSocket(fd: fd)
    }

    var localPort: UInt16 { SystemCalls.localAddress(fd)?.port ?? 0 }

    func waitFor(_ events: Int16, timeout: Double) throws {
        var descriptor = pollfd(fd: fd, events: events, revents: 0)
        let result = poll(&descriptor, 1, Int32(timeout * 1000))
        guard result > 0 else { throw TestFailure("raw socket: timed out waiting") }
    }

    func accept(timeout: Double = 30) throws -> RawSocket {
        try waitFor(Int16(POLLIN), timeout: timeout)
        let child = Glibc.accept(fd, nil, nil)
        guard child >= 0 else { throw TestFailure("accept: \(errno)") }
        return RawSocket(fd: child)
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { throw TestFailure("send: \(String(cString: strerror(errno)))") }
            offset += sent
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Exactly `count` bytes (fails on EOF or timeout).
    func receive(exactly count: Int, timeout: Double = 30) throws -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(count)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while result.count < count {
            try waitFor(Int16(POLLIN), timeout: timeout)
            let wanted = min(buffer.count, count - result.count)
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, wanted, 0) }
            guard got > 0 else { throw TestFailure("receive: EOF or error after \(result.count) of \(count) bytes") }
            result.append(contentsOf: buffer[0..<got])
        }
        return result
    }

    /// Everything until the peer closes.
    func receiveUntilEndOfStream(timeout: Double = 30) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            try waitFor(Int16(POLLIN), timeout: timeout)
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if got == 0 { return result }
            guard got > 0 else { throw TestFailure("receive: \(String(cString: strerror(errno)))") }
            result.append(contentsOf: buffer[0..<got])
        }
    }

    func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Closes with a reset (SO_LINGER 0) instead of a FIN.
    func reset() {
        guard fd >= 0 else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    func close() {
        guard fd >= 0 else { return }
        Glibc.close(fd)
        fd = -1
    }

    /// Gives up ownership (the descriptor was handed to SocketKit).
    func detach() -> Int32 {
        defer { fd = -1 }
        return fd
    }
}

/// Bytes that are easy to check: a counter pattern seeded by `seed`, repeating every 65521
/// bytes (a prime, so a shifted or dropped chunk shows up). Built by copying, which keeps
/// multi-megabyte payloads cheap in debug builds.
func pattern(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
    let period = 65521
    let block = (0..<min(count, period)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    var result: [UInt8] = []
    result.reserveCapacity(count)
    while result.count < count {
        result.append(contentsOf: block.prefix(count - result.count))
    }
    return result
}

/// A short path for a Unix socket, unique to this process and call.
func temporaryUnixPath(_ name: String) -> String {
    "/tmp/sk-\(getpid())-\(name)-\(UInt32.random(in: 0...UInt32.max)).sock"
}

/// The bytes of a string.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// A socket and its recorder; the socket keeps the recorder alive through `userData`
/// (delegates are held weakly, as upstream).
func recordedSocket(_ name: String = "recorder", callbackQueue: CallbackQueue = .eventLoop,
                    eventLoop: EventLoop? = nil) -> (Socket, Recorder) {
    let recorder = Recorder(name)
    let socket = Socket(delegate: recorder, callbackQueue: callbackQueue, eventLoop: eventLoop)
    socket.userData = recorder
    return (socket, recorder)
}

/// A one-shot signal between threads: `open()` once, `wait` until it is (bounded).
final class Latch: @unchecked Sendable {
    private let lock = ConditionLock()
    private var isOpen = false

    func open() {
        lock.withLock {
            isOpen = true
            lock.broadcast()
        }
    }

    @discardableResult
    func wait(timeout: Double = 10) -> Bool {
        let limit = deadline(afterSeconds: timeout)
        return lock.withLock {
            while !isOpen {
                if !lock.wait(untilDeadline: limit) { return isOpen }
            }
            return true
        }
    }
}
