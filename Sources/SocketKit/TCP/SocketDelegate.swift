// SPDX-License-Identifier: MIT
/// What a socket tells its user. Every method is optional (the defaults do nothing), runs
/// on the socket's callback queue, and never overlaps another callback of the same socket.
/// `socketDidDisconnect` is the last callback of each connection attempt or session.
///
/// The names follow GCDAsyncSocketDelegate as Swift imports it.
///
/// ## Isolation
///
/// The methods run on a thread of the callback queue (a loop thread, a queue's thread, the
/// main actor), while the code that made the delegate runs elsewhere: the delegate is shared
/// between them, so the protocol requires `Sendable` and Swift 6 checks every conforming
/// type. A class with unprotected mutable state, or one that is not `final`, does not
/// compile; keep the state in a `Mutex` (Synchronization), in `let`s of `Sendable` values, or
/// behind an actor the methods hand work to. `@unchecked Sendable` takes the responsibility
/// off the compiler: only for state the callbacks alone touch, on one queue.
///
/// A delegate that lives on the main actor conforms to `MainActorSocketDelegate` instead
/// (same methods, main-actor isolated): its callbacks run on the main actor
/// (`CallbackQueue.mainActor`), and it can touch main-actor state directly. A `@MainActor`
/// class cannot conform to this protocol with isolated methods (the compiler says the
/// conformance "crosses into main actor-isolated code"), and an isolated conformance
/// (`@MainActor SocketDelegate`) is refused because the protocol is `Sendable`: both would
/// run main-actor code on another thread.
///
/// ## Misspelled methods
///
/// Every requirement has a default implementation, so a method that misses a requirement's
/// name or types (`socket(_:didReadData:withTag:)` for `socket(_:didRead:withTag:)`,
/// `withError error: Error?` for `SocketError?`) compiles and is never called. To hear of a
/// near miss at compile time, declare the conformance in an extension that holds the
/// delegate methods:
///
/// ```swift
/// final class Handler: Sendable { ... }
/// extension Handler: SocketDelegate {
///     func socket(_ sock: Socket, didReadData data: [UInt8], withTag tag: Int) { }
///     // warning: instance method 'socket(_:didReadData:withTag:)' nearly matches
///     // defaulted requirement 'socket(_:didRead:withTag:)' of protocol 'SocketDelegate'
/// }
/// ```
///
/// and build with `-warnings-as-errors` (`swift build -Xswiftc -warnings-as-errors`) to
/// make it an error. The compiler looks for near misses only among the declarations of the
/// extension that declares the conformance: methods in the class body are not checked,
/// whether the class itself or an extension declares the conformance.
public protocol SocketDelegate: AnyObject, Sendable {
    /// Asked on the listener's event loop thread (not the callback queue) before a new
    /// connection is wrapped: the loop it should live on, or nil for the group's next loop.
    /// It may disconnect the listener: that connection is then closed unserved, and the
    /// listener's `socketDidDisconnect` follows once this returns.
    func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop?

    /// A listener accepted a connection. Keep a reference to `newSocket`: a socket nobody
    /// holds closes. It has the listener's delegate and callback queue; change them here
    /// if you like, before queueing reads.
    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket)

    /// A listener could not accept (out of descriptors or memory) and backs off, retrying
    /// by itself from 50 ms up to every second; told once per episode.
    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError)

    /// An outgoing connection (or an adopted descriptor) is up; `host` is the peer's IP.
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16)

    /// A Unix-domain connection is up; `path` is the listener's path.
    func socket(_ sock: Socket, didConnectToUnixPath path: String)

    /// A read finished. `data` is yours.
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int)

    /// A read into your own buffer finished: its bytes are at `buffer[range]`.
    /// The default implementation calls `socket(_:didRead:withTag:)` with a copy.
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int)

    /// A read to a length or separator made progress; `length` is what this pass added.
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int)

    /// The current read timed out. Return a positive number of seconds to extend it
    /// (`.infinity`: for good); zero or less, or NaN (the default: 0) ends the connection
    /// with `.readTimeout`.
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double

    /// A write was fully accepted by the kernel.
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int)

    /// A write made progress; `length` is what this system call wrote of it.
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int)

    /// The current write timed out; as for reads.
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double

    /// The peer closed its side and `autoDisconnectOnClosedReadStream` is off: the socket
    /// stays open for writing. Told once every byte that arrived before the close has been
    /// read: at once on a socket with nothing unread, whether or not a read is queued.
    func socketDidCloseReadStream(_ sock: Socket)

    /// The TLS handshake `startTLS` queued has finished: reads and writes queued after it
    /// now run encrypted. `sock.tlsInfo` tells what was negotiated.
    func socketDidSecure(_ sock: Socket)

    /// Manual trust evaluation (`TLSSettings.manualTrustEvaluation`): the handshake is done
    /// but nothing is read or written until `completionHandler` is called, from any thread,
    /// now or later: true trusts the peer (`socketDidSecure` follows), false disconnects with
    /// `.tlsPeerRejected`. Only the first call counts. The default implementation answers
    /// false. The handshake timeout keeps running meanwhile (it bounds how long an
    /// unauthenticated peer holds a connection, whoever is slow): without an answer in time
    /// the connection ends with `.tlsHandshakeTimeout` and a later answer does nothing; a
    /// delegate that needs longer raises `TLSSettings.handshakeTimeout` (or sets it negative).
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void)

    /// Queued, unwritten bytes reached the high watermark: the peer is not keeping up.
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int)

    /// Queued bytes drained to the low watermark after reaching the high one.
    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int)

    /// The answer to `cancelRead(withTag:)`, once per call: the reads with `tag` that had
    /// not completed are withdrawn, and what the current one had gathered is back in front
    /// of the unread bytes. A read with that tag that had already completed delivered its
    /// `didRead` before this. `unreadBytes`: the bytes SocketKit holds ahead of the next read
    /// (what it can get without waiting for the peer).
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int)

    /// The connection (or attempt, or listener) ended: nil after `disconnect` or a
    /// completed `disconnectAfter…`, otherwise why. The peer's close (`.closed`) or reset
    /// (`.system`, ECONNRESET or EPIPE) is reported after the bytes that arrived before it
    /// (under TLS, an alert that came before a reset is the error): at once on a socket
    /// with nothing unread, read queued or not; unread bytes wait for reads first.
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?)
}

extension SocketDelegate {
    public func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? { nil }
    public func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {}
    public func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) {}
    public func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {}
    public func socket(_ sock: Socket, didConnectToUnixPath path: String) {}
    public func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {}
    public func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int) {
        socket(sock, didRead: Array(UnsafeRawBufferPointer(rebasing: buffer[range])), withTag: tag)
    }
    public func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int) {}
    public func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { 0 }
    public func socket(_ sock: Socket, didWriteDataWithTag tag: Int) {}
    public func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int) {}
    public func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double { 0 }
    public func socketDidCloseReadStream(_ sock: Socket) {}
    public func socketDidSecure(_ sock: Socket) {}
    public func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) {
        completionHandler(false)
    }
    public func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {}
    public func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {}
    public func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) {}
    public func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {}
}

/// Events a receiver may not care about; the engine does not even produce those it does
/// not want (a C delegate with a NULL `did_write` costs nothing per write).
struct SocketEventInterests: OptionSet, Sendable {
    let rawValue: UInt32
    static let read = SocketEventInterests(rawValue: 1 << 0)
    static let readPartial = SocketEventInterests(rawValue: 1 << 1)
    static let write = SocketEventInterests(rawValue: 1 << 2)
    static let writePartial = SocketEventInterests(rawValue: 1 << 3)
    static let watermarks = SocketEventInterests(rawValue: 1 << 4)
    static let all = SocketEventInterests(rawValue: .max)
}

/// The front ends' side of event delivery: the Swift delegate adapter below, and the C
/// API's table of function pointers. Called on the callback queue with the gate held.
protocol SocketEventReceiver: AnyObject {
    /// Which optional events to produce at all.
    var interests: SocketEventInterests { get }

    /// Delivers one event; for `shouldTimeout…` events returns the extension in seconds, or
    /// NaN when the answer comes later (`Socket.answerTimeout`: the C API's event records).
    func receive(_ event: SocketEvent, on socket: Socket) -> Double
    /// The receiver for a connection accepted by a socket using this one.
    func receiverForAcceptedSocket() -> SocketEventReceiver?
    /// Asked on the listener's loop thread.
    func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop?
}

/// Delivers events to a Swift `SocketDelegate`, held weakly as upstream does (or to a
/// `MainActorSocketDelegate` through the adapter it keeps, which holds that one weakly).
final class SwiftDelegateReceiver: SocketEventReceiver {
    weak var delegate: SocketDelegate?
    /// The adapter of a main-actor delegate (nobody else holds it); nil otherwise.
    let mainActorAdapter: MainActorSocketDelegateAdapter?

    init(_ delegate: SocketDelegate?) {
        self.delegate = delegate
        mainActorAdapter = nil
    }

    init(mainActor target: MainActorSocketDelegate?) {
        let adapter = target.map { MainActorSocketDelegateAdapter($0) }
        delegate = adapter
        mainActorAdapter = adapter
    }

    /// The queue a main-actor delegate's callbacks must run on, whatever the socket's
    /// `callbackQueue` says (see `SocketFront.setReceiver`).
    var pinnedQueue: CallbackQueue? { mainActorAdapter == nil ? nil : CallbackQueue.mainActor }

    /// What `Socket.delegate` reports: not the adapter.
    var publicDelegate: SocketDelegate? { mainActorAdapter == nil ? delegate : nil }

    /// A Swift protocol cannot tell which methods are implemented: everything.
    var interests: SocketEventInterests { .all }

    func receive(_ event: SocketEvent, on socket: Socket) -> Double {
        guard let delegate else {
            // Nobody to judge the peer: reject at once rather than wait for the timeout.
            if case .didReceiveTrust(_, let question) = event { socket.answerTrust(question: question, accept: false) }
            if case .didDisconnect = event {} else {
                EngineLog.log(.debug, .callbacks, "a socket's delegate is gone (delegates are held weakly): "
                    + "\(EngineLog.name(of: event)) dropped")
            }
            return 0
        }
        switch event {
        case .didConnect(let peer, let proxied):
            if let proxied {
                delegate.socket(socket, didConnectToHost: proxied.host, port: proxied.port)
            } else if peer.family == .unix {
                delegate.socket(socket, didConnectToUnixPath: peer.unixDisplayName ?? "")
            } else {
                delegate.socket(socket, didConnectToHost: peer.host ?? "", port: peer.port)
            }
        case .didAccept:
            break
        case .didAcceptSocket(let child):
            delegate.socket(socket, didAcceptNewSocket: child)
        case .didNotAccept(let error):
            delegate.socket(socket, didPauseAcceptingWithError: error)
        case .didRead(let payload, let tag):
            switch payload {
            case .borrowed(let bytes):
                delegate.socket(socket, didRead: Array(bytes), withTag: tag)
            case .owned(let bytes):
                delegate.socket(socket, didRead: bytes, withTag: tag)
            case .callerBuffer(let buffer, let range):
                delegate.socket(socket, didReadInto: buffer, range: range, withTag: tag)
            }
        case .didReadPartial(let length, let tag):
            delegate.socket(socket, didReadPartialDataOfLength: length, tag: tag)
        case .shouldTimeoutRead(let tag, let elapsed, let bytesDone, _):
            return timeoutAnswer(delegate.socket(socket, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: bytesDone))
        case .didWrite(let tag):
            delegate.socket(socket, didWriteDataWithTag: tag)
        case .didWritePartial(let length, let tag):
            delegate.socket(socket, didWritePartialDataOfLength: length, tag: tag)
        case .shouldTimeoutWrite(let tag, let elapsed, let bytesDone, _):
            return timeoutAnswer(delegate.socket(socket, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: bytesDone))
        case .didCloseReadStream:
            delegate.socketDidCloseReadStream(socket)
        case .didSecure:
            delegate.socketDidSecure(socket)
        case .didReceiveTrust(let trust, let question):
            delegate.socket(socket, didReceiveTrust: trust) { [weak socket] accept in
                socket?.answerTrust(question: question, accept: accept)
            }
        case .didReachWriteHighWatermark(let queuedBytes):
            delegate.socket(socket, writeQueueDidReachHighWatermark: queuedBytes)
        case .didDrainToWriteLowWatermark(let queuedBytes):
            delegate.socket(socket, writeQueueDidDrainToLowWatermark: queuedBytes)
        case .didDisconnect(let error):
            delegate.socketDidDisconnect(socket, withError: error)
        case .didCancelRead(let tag, let unreadBytes):
            delegate.socket(socket, didCancelReadWithTag: tag, unreadBytes: unreadBytes)
        }
        return 0
    }

    func receiverForAcceptedSocket() -> SocketEventReceiver? { self }

    func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop? {
        delegate?.newEventLoop(forConnectionFrom: address, on: listener)
    }
}

/// A delegate's answer to a timeout question, as the engine takes it: NaN (which would mean
/// "answered later") counts as no extension.
@inline(__always)
func timeoutAnswer(_ seconds: Double) -> Double { seconds.isNaN ? 0 : seconds }
