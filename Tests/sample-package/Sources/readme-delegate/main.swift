// SPDX-License-Identifier: MIT
import SocketKit

/// Echoes every line it reads, on each connection it accepts.
@MainActor final class EchoServer: MainActorSocketDelegate {
    var connections: [Socket] = []                          // a socket nobody holds closes
    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        connections.append(newSocket)
        try? newSocket.read(toData: Socket.lf)
    }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        try? sock.write(data)
        try? sock.read(toData: Socket.lf)
    }
}

/// Sends a line, prints what comes back, hangs up.
@MainActor final class Client: MainActorSocketDelegate {
    var finished: CheckedContinuation<Void, Never>?
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        try? sock.write(Array("hello, delegate\n".utf8))
        try? sock.read(toData: Socket.lf, timeout: 5)
    }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        print("read:", String(decoding: data, as: UTF8.self), terminator: "")
        sock.disconnect()
    }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        if let error { print("failed:", error) }
        finished?.resume()
    }
}

let server = EchoServer(), client = Client()                // delegates are held weakly
let listener = Socket(delegate: server)                     // callbacks on the main actor
try listener.accept(onInterface: "localhost", port: 0)
let socket = Socket(delegate: client)
try socket.connect(toHost: "localhost", port: listener.localPort, timeout: 5)
await withCheckedContinuation { client.finished = $0 }      // the callbacks run meanwhile
listener.disconnect()
