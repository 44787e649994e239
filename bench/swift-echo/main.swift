// SocketKit echo server through the Swift API, for the benchmark harness and the
// descriptor-exhaustion test.
//
//   socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N]
//
// Echoes every TCP byte on one event-loop thread (callbacks run on the loop), binds
// 127.0.0.1 unless --host is given, prints "listening on PORT" (useful with --port 0),
// reports accept back-off on stdout ("accept paused: ..."), and runs until SIGTERM.
// With --udp-port it also sends every UDP datagram back to its sender. With --tls CERT KEY
// every connection starts TLS (server side) before its first read.
import Glibc
import SocketKit

final class EchoServer: SocketDelegate, @unchecked Sendable {
    private var connections: [ObjectIdentifier: Socket] = [:]
    private let lock = Lock()
    var tls: TLSSettings? = nil

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        lock.withLock { connections[ObjectIdentifier(newSocket)] = newSocket }
        if let tls {
            do { try newSocket.startTLS(tls) } catch { say("startTLS: \(error)", to: 2) }
        }
        try? newSocket.read()
    }

    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) {
        say("accept paused: \(error)")
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        try? sock.write(data)
        try? sock.read()
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        lock.withLock { _ = connections.removeValue(forKey: ObjectIdentifier(sock)) }
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
var udpPort: UInt16? = nil
var tls: TLSSettings? = nil
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--port": port = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--host": host = arguments.popFirst() ?? host
    case "--loops": loopCount = Int(arguments.popFirst() ?? "") ?? 1
    case "--udp-port": udpPort = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--tls":
        let certificate = arguments.popFirst() ?? "", key = arguments.popFirst() ?? ""
        tls = .server(certificateChain: .file(certificate), privateKey: .file(key))
    default:
        say("usage: socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N] [--tls CERT KEY]", to: 2)
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
do {
    try listener.accept(onInterface: host, port: port)
} catch {
    say("socketkit-echo: \(error)", to: 2)
    exit(1)
}
say("listening on \(listener.localPort)")
while true { pause() }
