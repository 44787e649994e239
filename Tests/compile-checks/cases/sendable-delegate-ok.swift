// SPDX-License-Identifier: MIT
// What compiles without a warning: state behind a Mutex, any callback queue.
// expect-clean
import SocketKit
import Synchronization

final class Counter: SocketDelegate {
    private let received = Mutex(0)
    var total: Int { received.withLock { $0 } }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        received.withLock { $0 += data.count }
        try? sock.read()
    }
}

func start(_ counter: Counter) throws -> Socket {
    let queue = try SerialCallbackQueue()
    let socket = Socket(delegate: counter, callbackQueue: queue)
    try socket.connect(toHost: "127.0.0.1", port: 7)
    return socket
}
