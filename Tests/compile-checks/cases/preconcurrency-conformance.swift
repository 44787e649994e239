// SPDX-License-Identifier: MIT
// `@preconcurrency` conformance (a fix-it the compiler offers) still compiles: it asks for
// run-time checks instead, and its methods stop the program when called off the main actor.
// Documented: use MainActorSocketDelegate, or `callbackQueue: .mainActor` with it.
// expect-clean
import SocketKit

@MainActor final class Screen: @preconcurrency SocketDelegate {
    var count = 0
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) { count += 1 }
}
