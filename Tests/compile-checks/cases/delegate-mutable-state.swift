// SPDX-License-Identifier: MIT
// A delegate's methods run on the callback queue's thread: unprotected state is a race.
// expect-error: stored property 'received' of 'Sendable'-conforming class 'Counter' is mutable
import SocketKit

final class Counter: SocketDelegate {
    var received = 0
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) { received += data.count }
}
