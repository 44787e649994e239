// SPDX-License-Identifier: MIT
// A user's own bridge from delegate callbacks to async code: the continuation is touched
// by the loop thread (didRead) and by the awaiting task.
// expect-error: stored property 'waiting' of 'Sendable'-conforming class 'Bridge' is mutable
import SocketKit

final class Bridge: SocketDelegate {
    var waiting: CheckedContinuation<[UInt8], Never>?

    func nextRead(_ sock: Socket) async -> [UInt8] {
        await withCheckedContinuation { continuation in
            waiting = continuation
            try? sock.read()
        }
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        waiting?.resume(returning: data)
        waiting = nil
    }
}
