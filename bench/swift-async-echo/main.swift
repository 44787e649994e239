// SPDX-License-Identifier: MIT
// SocketKit echo server through the Swift async API (AsyncListener, AsyncSocket,
// AsyncUdpSocket), for the benchmark harness beside bench/swift-echo (the delegate one).
//
//   socketkit-async-echo --port P [--udp-port Q] [--host ADDR] [--tls CERT KEY]
//
// One event-loop thread. Each connection is a task of a discarding task group that prefers
// the connection's loop as its executor, so the task runs beside its I/O, as a delegate on
// the loop does. Echoes TCP (TLS when asked), and with --udp-port every UDP datagram back to
// its sender. Prints "listening on PORT" and runs until SIGTERM.
//
// Backpressure comes with the API: each write returns once the kernel took the bytes, and
// the next read waits for it, so a client that does not read its echo stops being read.
import Glibc
import SocketKit

func say(_ text: String, to descriptor: Int32 = 1) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
}

var port: UInt16 = 0
var host = "127.0.0.1"
var udpPort: UInt16? = nil
var tls: TLSSettings? = nil
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--port": port = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--host": host = arguments.popFirst() ?? host
    case "--udp-port": udpPort = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--tls":
        let certificate = arguments.popFirst() ?? "", key = arguments.popFirst() ?? ""
        tls = .server(certificateChain: .file(certificate), privateKey: .file(key))
    default:
        say("usage: socketkit-async-echo --port P [--udp-port Q] [--host ADDR] [--tls CERT KEY]", to: 2)
        exit(2)
    }
}

// The runner stops us with SIGTERM; make sure it is neither ignored nor blocked.
signal(SIGTERM) { _ in _exit(0) }
var termination = sigset_t()
sigemptyset(&termination)
sigaddset(&termination, SIGTERM)
pthread_sigmask(SIG_UNBLOCK, &termination, nil)

let group = EventLoopGroup(loopCount: 1)
let loop = group.next()
let serverTLS = tls

/// Echoes one connection until the peer closes it.
nonisolated(nonsending) func echo(_ connection: AsyncSocket) async throws {
    if let serverTLS { try await connection.startTLS(serverTLS) }
    for try await chunk in connection.chunks() {
        try await connection.write(chunk)
    }
}

do {
    // Bound before the TCP listener, so a client that sees "listening" finds both.
    let udp = try udpPort.map { try AsyncUdpSocket(host: host, port: $0, eventLoop: loop) }
    let listener = try AsyncListener(host: host, port: port, eventLoop: loop) { $0.noDelay = true }
    say("listening on \(listener.localPort)")
    try await withTaskExecutorPreference(loop) {
        try await withThrowingDiscardingTaskGroup { tasks in
            if let udp {
                tasks.addTask {
                    for try await datagram in udp.datagrams {
                        try? await udp.send(datagram.bytes, to: datagram.sender)
                    }
                }
            }
            for try await connection in listener.connections {
                tasks.addTask(executorPreference: connection.eventLoop) {
                    // One connection's end or failure is its own: the server goes on.
                    try? await connection.executeThenClose(echo)
                }
            }
        }
    }
} catch {
    say("socketkit-async-echo: \(error)", to: 2)
    exit(1)
}
