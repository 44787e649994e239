// SPDX-License-Identifier: MIT
// The two misspellings, declared as the documentation advises: each is a warning
// (an error with -warnings-as-errors).
// expect-warning: instance method 'socket(_:didReadData:withTag:)' nearly matches defaulted requirement 'socket(_:didRead:withTag:)' of protocol 'SocketDelegate'
// expect-warning: instance method 'socketDidDisconnect(_:withError:)' nearly matches defaulted requirement 'socketDidDisconnect(_:withError:)' of protocol 'SocketDelegate'
import SocketKit

final class Handler: Sendable {}

extension Handler: SocketDelegate {
    func socket(_ sock: Socket, didReadData data: [UInt8], withTag tag: Int) {}
    func socketDidDisconnect(_ sock: Socket, withError error: Error?) {}
}
