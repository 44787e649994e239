// SPDX-License-Identifier: MIT
// The async API from the main actor and from task groups, without a warning in Swift 6
// mode: its types are Sendable, its sequences iterate from any isolation.
// expect-clean
import SocketKit

@MainActor final class Screen {
    var lines: [String] = []

    func show(host: String, port: UInt16) async throws {
        try await AsyncSocket.withConnection(toHost: host, port: port, timeout: .seconds(5)) { connection in
            try await connection.write(Array("hello\n".utf8))
            for try await line in connection.messages(separatedBy: Socket.lf, maxLength: 4096) {
                lines.append(String(decoding: line, as: UTF8.self))
            }
        }
    }
}

func serve(_ listener: AsyncListener) async throws {
    try await listener.executeThenClose { connections in
        try await withThrowingDiscardingTaskGroup { group in
            for try await connection in connections {
                group.addTask(executorPreference: connection.eventLoop) {
                    try await connection.executeThenClose { connection in
                        for try await chunk in connection.chunks() { try await connection.write(chunk) }
                    }
                }
            }
        }
    }
}

func datagrams(_ udp: AsyncUdpSocket) async throws -> Int {
    var count = 0
    for try await datagram in udp.datagrams {
        try await udp.send(datagram.bytes, to: datagram.sender)
        count += 1
    }
    return count
}
