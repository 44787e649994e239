// SPDX-License-Identifier: MIT
// A main-actor class conforming to the nonisolated protocol would run main-actor code on
// the loop thread.
// expect-error: conformance of 'Screen' to protocol 'SocketDelegate' crosses into main actor-isolated code
import SocketKit

@MainActor final class Screen: SocketDelegate {
    var lines: [String] = []
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        lines.append(String(decoding: data, as: UTF8.self))
    }
}
