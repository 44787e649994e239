// SocketKit echo server through the Swift API, for the benchmark harness and the
// descriptor-exhaustion test.
//
//   socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N]
//
// Echoes every TCP byte on one event-loop thread (callbacks run on the loop), binds
// 127.0.0.1 unless --host is given, prints "listening on PORT" (useful with --port 0),
// reports accept back-off on stdout ("accept paused: ..."), and runs until SIGTERM.
// UDP (--udp-port) and TLS (--tls) arrive with those capabilities; both are accepted and
// ignored today, so the harness lists this server as "tcp" only.
import Glibc
import SocketKit

final class EchoServer: SocketDelegate, @unchecked Sendable {
    private var connections: [ObjectIdentifier: Socket] = [:]
    private let lock = Lock()

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        lock.withLock { connections[ObjectIdentifier(newSocket)] = newSocket }
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
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--port": port = UInt16(arguments.popFirst() ?? "") ?? 0
    case "--host": host = arguments.popFirst() ?? host
    case "--loops": loopCount = Int(arguments.popFirst() ?? "") ?? 1
    case "--udp-port": _ = arguments.popFirst()
    case "--tls": _ = arguments.popFirst(); _ = arguments.popFirst()
    default:
        say("usage: socketkit-echo --port P [--udp-port Q] [--host ADDR] [--loops N]", to: 2)
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
