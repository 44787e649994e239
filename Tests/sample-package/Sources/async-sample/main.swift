// SPDX-License-Identifier: MIT
// SocketKit's async API end to end, as a package that depends on it would use it: a TCP
// echo, a STARTTLS exchange and a UDP exchange, each a server and a client in this process.
//
//   async-sample CERT KEY      a certificate for "localhost" and its key (the client trusts it)
import Glibc
import SocketKit

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    print("usage: async-sample CERT KEY")
    exit(2)
}
let serverTLS = TLSSettings.server(certificateChain: .file(arguments[1]), privateKey: .file(arguments[2]))
let clientTLS = TLSSettings(peerName: "localhost", trustRoots: .file(arguments[1]))

@Sendable func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

/// A server that runs `serve` on each connection, as a task of its own, until `client`
/// returns; then the listener closes and the server's tasks end.
func withServer(_ serve: @escaping @Sendable (AsyncSocket) async throws -> Void,
                client: (UInt16) async throws -> Void) async throws {
    let listener = try AsyncListener(host: "localhost", port: 0)
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            try await listener.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask(executorPreference: connection.eventLoop) {
                            try await connection.executeThenClose(serve)
                        }
                    }
                }
            }
        }
        try await client(listener.localPort)
        listener.close()
        try await tasks.waitForAll()
    }
}

func tcpEcho() async throws {
    try await withServer({ connection in
        for try await chunk in connection.chunks() { try await connection.write(chunk) }
    }) { port in
        try await AsyncSocket.withConnection(toHost: "localhost", port: port, timeout: .seconds(5)) { connection in
            let message = (0..<100_000).map { UInt8(truncatingIfNeeded: $0) }
            try await connection.write(message)
            let echoed = try await connection.read(exactly: message.count)
            guard echoed == message else { throw SocketError(.other, "the echo differs") }
            print("tcp echo: \(echoed.count) bytes back")
        }
    }
}

func starttls() async throws {
    try await withServer({ connection in
        // A line protocol that upgrades in place, as SMTP's STARTTLS does.
        for try await line in connection.messages(separatedBy: Socket.crlf, maxLength: 1000) {
            switch text(line) {
            case "STARTTLS":
                try await connection.write(Array("OK\r\n".utf8))
                try await connection.startTLS(serverTLS)
            case let other:
                try await connection.write(Array("got \(other) (\(connection.isSecure ? "secure" : "plain"))\r\n".utf8))
            }
        }
    }) { port in
        try await AsyncSocket.withConnection(toHost: "localhost", port: port, timeout: .seconds(5)) { connection in
            for line in ["hello", "STARTTLS", "secret"] {
                if line == "secret" { try await connection.startTLS(clientTLS) }
                try await connection.write(Array("\(line)\r\n".utf8))
                let answer = text(try await connection.read(upTo: Socket.crlf, maxLength: 1000).dropLast(2).map { $0 })
                print("starttls: \(line) -> \(answer)")
            }
            print("starttls: \(connection.socket.tlsInfo.map { "\($0.protocolVersion)" } ?? "not secure")")
        }
    }
}

func udpExchange() async throws {
    let server = try AsyncUdpSocket(host: "127.0.0.1")
    let client = try AsyncUdpSocket(host: "127.0.0.1")
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            for try await datagram in server.datagrams {
                try await server.send(Array("pong: ".utf8) + datagram.bytes, to: datagram.sender)
            }
        }
        let destination = try SocketAddress(ipAddress: "127.0.0.1", port: server.localPort)
        var replies = client.datagrams.makeAsyncIterator()
        for word in ["one", "two"] {
            try await client.send(Array(word.utf8), to: destination)
            guard let reply = try await replies.next() else { throw SocketError(.other, "no reply") }
            print("udp: \(word) -> \(text(reply.bytes))")
        }
        await server.close()
        await client.close()
        try await tasks.waitForAll()
    }
}

do {
    try await tcpEcho()
    try await starttls()
    try await udpExchange()
    print("async-sample: ok")
} catch {
    print("async-sample failed: \(error)")
    exit(1)
}
