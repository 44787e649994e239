// SPDX-License-Identifier: MIT
import Glibc

/// A listener with one accepting socket per loop of its group (`Socket.acceptsOnEveryLoop`).
///
/// The socket the user holds (the primary) listens on its own loop with SO_REUSEPORT; every
/// other loop of the group gets a sibling: a hidden `Socket` of its own on that loop,
/// listening on the same addresses with SO_REUSEPORT, so the kernel spreads incoming
/// connections over them. Each listener keeps what it accepts on its own loop (no hand-off
/// between threads), and its sibling's `didAccept` reaches the user's receiver with the
/// primary as the listener (`SiblingReceiver`), from that loop (on `.eventLoop`) or through
/// that sibling's mailbox onto the shared callback queue.
///
/// Siblings are found through `MultiLoopListeners.siblings`, keyed by the primary's core
/// (which outlives its front: the primary's release still ends them), and looked at only
/// for listeners: a connection pays nothing for it. They end with the primary's listening
/// session (`TCPSocketCore.closeSession` of a core that `spreadsOverLoops`).
enum MultiLoopListeners {
    struct Entry {
        let session: UInt64
        let siblings: [Socket]
    }

    static let table = LockedValue<[ObjectIdentifier: Entry]>([:])

    static func siblings(of core: TCPSocketCore) -> [Socket] {
        table.withLock { $0[ObjectIdentifier(core)]?.siblings ?? [] }
    }

    /// Ends the siblings of `core`'s listening session (each returns with its port free).
    static func stopSiblings(of core: TCPSocketCore) {
        let removed = table.withLock { $0.removeValue(forKey: ObjectIdentifier(core)) }
        for sibling in removed?.siblings ?? [] { sibling.disconnect() }
    }

    /// Starts a sibling of `primary` on `loop` listening on `addresses` (the primary's, with
    /// the ports it got). Registered before it listens, so a failure of the primary's
    /// session meanwhile still ends it.
    static func startSibling(of primary: Socket, session: UInt64, on loop: EventLoop,
                             addresses: [SocketAddress], receiver: SocketEventReceiver?,
                             queue: CallbackQueue, configuration: SocketConfiguration) throws(SocketError) {
        let core = TCPSocketCore(loop: loop, configuration: configuration)
        let sibling = Socket(siblingCore: core, receiver: receiver.map { SiblingReceiver($0, primary: primary, session: session) },
                             callbackQueue: queue)
        let key = ObjectIdentifier(primary.core)
        table.withLock { entries in
            let known = entries[key]?.siblings ?? []
            entries[key] = Entry(session: session, siblings: known + [sibling])
        }
        try sibling.onLoop { (core: TCPSocketCore) throws(SocketError) in
            try core.requestListen(requireFamilies: false, multiLoop: false) { configuration throws(SocketError) in
                var made: [ListenerFactory.Listener] = []
                do throws(SocketError) {
                    for address in addresses {
                        made.append(try ListenerFactory.listen(on: address, configuration: configuration))
                    }
                } catch {
                    for listener in made { close(listener.fd) }
                    throw error
                }
                return made
            }
        }
    }

    /// The primary's receiver or callback queue changed: its siblings follow, synchronously
    /// (each waits for a callback of its own running elsewhere, as `setReceiver` does).
    static func routingChanged(of primary: Socket, receiver: SocketEventReceiver?, queue: CallbackQueue) {
        guard let entry = table.withLock({ $0[ObjectIdentifier(primary.core)] }) else { return }
        for sibling in entry.siblings {
            sibling.setReceiver(receiver.map { SiblingReceiver($0, primary: primary, session: entry.session) },
                                callbackQueue: queue)
        }
    }
}

/// A sibling's receiver: the primary's receiver, told of the sibling's `didAccept` and
/// `didPauseAccepting` with the primary as the listener; the sibling's other events (its
/// own `didDisconnect`) are its own business. Events that come after the primary's listening
/// session ended are dropped (an accepted socket nobody takes closes).
final class SiblingReceiver: SocketEventReceiver {
    let receiver: SocketEventReceiver
    /// Weak: the siblings must not keep a primary nobody holds from closing.
    weak var primary: Socket?
    let session: UInt64

    init(_ receiver: SocketEventReceiver, primary: Socket, session: UInt64) {
        self.receiver = receiver
        self.primary = primary
        self.session = session
    }

    var interests: SocketEventInterests { receiver.interests }

    func receive(_ event: SocketEvent, on socket: Socket) -> Double {
        switch event {
        case .didAcceptSocket, .didNotAccept:
            guard let primary,
                  primary.core.readPublished({ $0.session == session && $0.status == .accepting }) else { return 0 }
            return receiver.receive(event, on: primary)
        default:
            return 0
        }
    }

    func receiverForAcceptedSocket() -> SocketEventReceiver? { receiver.receiverForAcceptedSocket() }

    func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop? { nil }
}
