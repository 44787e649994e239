// SPDX-License-Identifier: MIT
import SocketKit

let listener = try AsyncListener(host: "localhost", port: 0)
async let served: Void = listener.executeThenClose { connections in
    try await withThrowingDiscardingTaskGroup { group in
        for try await connection in connections {           // each connection, its own task
            group.addTask(executorPreference: connection.eventLoop) {
                try await connection.executeThenClose { connection in
                    for try await chunk in connection.chunks() { try await connection.write(chunk) }
                }
            }
        }
    }
}
try await AsyncSocket.withConnection(toHost: "localhost", port: listener.localPort, timeout: .seconds(5)) { connection in
    try await connection.write(Array("hello, async\n".utf8))
    let line = try await connection.read(upTo: Socket.lf, maxLength: 1024)
    print("read:", String(decoding: line, as: UTF8.self), terminator: "")
}                                                           // closed here, whatever happened
listener.close()                                            // the server's sequence ends
try await served
