// SPDX-License-Identifier: MIT
// A main-actor delegate is set from the main actor only.
// expect-error: call to main actor-isolated initializer 'init(delegate:eventLoop:)' in a synchronous nonisolated context
import SocketKit

@MainActor final class Screen: MainActorSocketDelegate {
    var lines: [String] = []
}

nonisolated func connect(_ screen: Screen) -> Socket {
    Socket(delegate: screen)
}
