// SPDX-License-Identifier: MIT
// SE-0470's isolated conformance is refused: the protocol is Sendable, so the socket may
// call it from any thread.
// expect-error: cannot form main actor-isolated conformance of 'Screen' to SendableMetatype-inheriting protocol 'SocketDelegate'
import SocketKit

@MainActor final class Screen: @MainActor SocketDelegate {
    var lines: [String] = []
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        lines.append(String(decoding: data, as: UTF8.self))
    }
}
