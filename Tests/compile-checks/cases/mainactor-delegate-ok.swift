// SPDX-License-Identifier: MIT
// What compiles without a warning: a main-actor delegate with main-actor state, set from
// the main actor (its callbacks run there), TCP and UDP.
// expect-clean
import SocketKit

@MainActor final class Screen: MainActorSocketDelegate, MainActorUdpSocketDelegate {
    var lines: [String] = []
    var socket: Socket?
    var datagrams: UdpSocket?

    func start() throws {
        let socket = Socket(delegate: self)
        try socket.connect(toHost: "127.0.0.1", port: 7, timeout: 1)
        self.socket = socket
        let datagrams = UdpSocket(delegate: self)
        try datagrams.bind(toPort: 0, interface: "127.0.0.1")
        self.datagrams = datagrams
    }

    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        lines.append("connected to \(host)")
        try? sock.read(toData: Socket.lf)
    }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        lines.append(String(decoding: data, as: UTF8.self))
    }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        socket = nil
    }
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        lines.append("datagram from \(address)")
    }
}
