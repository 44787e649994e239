// SPDX-License-Identifier: MIT
// A line echo server and a client in one process, both on loopback. Callbacks run on a
// host-driven queue that this main thread drains whenever its descriptor is readable,
// the way an application with its own poll loop would use SocketKit.
import Glibc
import SocketKit

final class LineEchoServer: SocketDelegate {
    private var connections: [Socket] = []
    /// Backpressure: connections whose client does not read its echo (write queue above
    /// the high watermark) are not read from until their queue has drained to the low
    /// watermark, so the echo cannot pile up without bound.
    private var pausedConnections: Set<ObjectIdentifier> = []
    private var readingConnections: Set<ObjectIdentifier> = []

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        connections.append(newSocket)
        readLine(newSocket)
    }

    private func readLine(_ sock: Socket) {
        readingConnections.insert(ObjectIdentifier(sock))
        try? sock.read(toData: Socket.lf, maxLength: 4096)
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        readingConnections.remove(ObjectIdentifier(sock))
        try? sock.write(data)
        if !pausedConnections.contains(ObjectIdentifier(sock)) { readLine(sock) }
    }

    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {
        pausedConnections.insert(ObjectIdentifier(sock))
    }

    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {
        pausedConnections.remove(ObjectIdentifier(sock))
        if !readingConnections.contains(ObjectIdentifier(sock)) { readLine(sock) }
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        connections.removeAll { $0 === sock }
        pausedConnections.remove(ObjectIdentifier(sock))
        readingConnections.remove(ObjectIdentifier(sock))
    }
}

final class LineClient: SocketDelegate {
    let lines: [String]
    private(set) var finished = false
    private(set) var failure: SocketError?

    init(lines: [String]) { self.lines = lines }

    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        print("connected to \(host) port \(port)")
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        print("echoed: \(String(decoding: data.dropLast(), as: UTF8.self))")
        if tag == lines.count - 1 { sock.disconnectAfterWriting() }
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        failure = error
        finished = true
    }
}

do {
    let callbacks = try HostCallbackQueue()
    let server = LineEchoServer()
    let listener = Socket(delegate: server, callbackQueue: callbacks)
    try listener.accept(onInterface: "localhost", port: 0)
    print("listening on localhost port \(listener.localPort) (IPv4 and IPv6)")

    let client = LineClient(lines: ["hello", "from", "SocketKit"])
    let socket = Socket(delegate: client, callbackQueue: callbacks)
    try socket.connect(toHost: "localhost", port: listener.localPort, timeout: 5)
    // Queued before the connection is up: they run in order once it is.
    for (tag, line) in client.lines.enumerated() {
        try socket.write(Array((line + "\n").utf8), timeout: 5, tag: tag)
        try socket.read(toData: Socket.lf, timeout: 5, tag: tag)
    }

    while !client.finished {
        var ready = pollfd(fd: callbacks.fileDescriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&ready, 1, 10_000) > 0 else {
            print("demo: timed out")
            exit(1)
        }
        callbacks.drain()
    }
    listener.disconnect()
    if let failure = client.failure {
        print("demo failed: \(failure)")
        exit(1)
    }
    print("demo: ok")
} catch {
    print("demo failed: \(error)")
    exit(1)
}
