// SPDX-License-Identifier: MIT
// SocketKit echo server through the Swift API, for the benchmark harness and the
// descriptor-exhaustion test.
//
//   socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N [--every-loop]]
//
// With --loops N the server has N event loops; connections are handed round-robin from the
// listener's loop to the next loop, or, with --every-loop, accepted on every loop by a
// listener with one SO_REUSEPORT socket per loop (Socket.acceptsOnEveryLoop): each stays on
// the loop that accepted it (bench/multiloop.sh compares them).
//
// Echoes every TCP byte on one event-loop thread (callbacks run on the loop), binds
// 127.0.0.1 unless --host is given, prints "listening on PORT" (useful with --port 0),
// reports accept back-off on stdout ("accept paused: ..."), and runs until SIGTERM.
// With --udp-port it also sends every UDP datagram back to its sender. With --tls CERT KEY
// every connection starts TLS (server side) before its first read.
//
// Backpressure: a client that sends but does not read its echo would make the server queue
// the echo without bound, so each connection stops reading while its write queue is above
// the high watermark and reads again once it has drained to the low one (`Connection`).
import Glibc
import SocketKit

final class EchoServer: SocketDelegate, @unchecked Sendable {
    private var connections: [ObjectIdentifier: Socket] = [:]
    private let lock = Lock()
    var tls: TLSSettings? = nil

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        lock.withLock { connections[ObjectIdentifier(newSocket)] = newSocket }
        let connection = Connection(server: self)
        newSocket.userData = connection // the delegate is held weakly
        newSocket.delegate = connection
        if let tls {
            do { try newSocket.startTLS(tls) } catch { say("startTLS: \(error)", to: 2) }
        }
        connection.readNext(newSocket)
    }

    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) {
        say("accept paused: \(error)")
    }

    func remove(_ sock: Socket) {
        lock.withLock { _ = connections.removeValue(forKey: ObjectIdentifier(sock)) }
    }
}

/// One client: echoes what it sends, reading no more from it while it does not read what
/// comes back (its write queue above the high watermark) until the queue has drained to
/// the low one. Its callbacks never overlap, so its flags need no lock.
final class Connection: SocketDelegate, @unchecked Sendable {
    private unowned let server: EchoServer
    private var readQueued = false
    private var aboveHighWatermark = false

    init(server: EchoServer) { self.server = server }

    func readNext(_ sock: Socket) {
        readQueued = true
        try? sock.read()
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        readQueued = false
        try? sock.write(data)
        if !aboveHighWatermark { readNext(sock) }
    }

    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {
        aboveHighWatermark = true
    }

    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {
        aboveHighWatermark = false
        if !readQueued { readNext(sock) }
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        server.remove(sock)
    }
}

/// Sends every datagram back to where it came from.
final class UdpEcho: UdpSocketDelegate {
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        try? sock.send(data, toAddress: address)
    }
}

/// Writes a line straight to a descriptor (unbuffered, so a reading test sees it at once).
func say(_ text: String, to descriptor: Int32 = 1) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
}

/// A minimal mutex for the connection table (callbacks may run on several loops).
final class Lock: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    func withLock<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }
}

var port: UInt16 = 0
var host = "127.0.0.1"
var loopCount = 1
var everyLoop = false
var udpPort: UInt16? = nil
var tls: TLSSettings? = nil
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--port": port = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--host": host = arguments.popFirst() ?? host
    case "--loops": loopCount = Int(arguments.popFirst() ?? "") ?? 1
    case "--every-loop": everyLoop = true
    case "--udp-port": udpPort = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--tls":
        let certificate = arguments.popFirst() ?? "", key = arguments.popFirst() ?? ""
        tls = .server(certificateChain: .file(certificate), privateKey: .file(key))
    default:
        say("usage: socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N [--every-loop]] [--tls CERT KEY]", to: 2)
        exit(2)
    }
}

// The runner stops us with SIGTERM; make sure it is neither ignored nor blocked.
signal(SIGTERM) { _ in _exit(0) }
var termination = sigset_t()
sigemptyset(&termination)
sigaddset(&termination, SIGTERM)
pthread_sigmask(SIG_UNBLOCK, &termination, nil)
let group = EventLoopGroup(loopCount: loopCount)
let server = EchoServer()
server.tls = tls
let udpEcho = UdpEcho()
var udpSocket: UdpSocket? = nil
if let udpPort {
    // Bound before the TCP listener, so a client that sees "listening" finds both.
    let sock = UdpSocket(delegate: udpEcho, eventLoop: group.next())
    do {
        try sock.bind(toPort: udpPort, interface: host)
        try sock.beginReceiving()
    } catch {
        say("socketkit-echo: UDP: \(error)", to: 2)
        exit(1)
    }
    udpSocket = sock
}
let listener = Socket(delegate: server, eventLoop: group.next())
listener.noDelay = true // inherited by accepted connections, as every bench server sets TCP_NODELAY
listener.acceptsOnEveryLoop = everyLoop
do {
    try listener.accept(onInterface: host, port: port)
} catch {
    say("socketkit-echo: \(error)", to: 2)
    exit(1)
}
say("listening on \(listener.localPort)")
while true { pause() }
