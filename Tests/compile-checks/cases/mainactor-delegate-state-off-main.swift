// SPDX-License-Identifier: MIT
// Its state stays on the main actor: touching it from elsewhere is refused.
// expect-error: main actor-isolated property 'lines' can not be referenced from a nonisolated context
import SocketKit

@MainActor final class Screen: MainActorSocketDelegate {
    var lines: [String] = []
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        lines.append(String(decoding: data, as: UTF8.self))
    }
}

nonisolated func peek(_ screen: Screen) -> Int { screen.lines.count }
