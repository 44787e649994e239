// SPDX-License-Identifier: MIT
/// A socket delegate that lives on the main actor: `SocketDelegate`'s methods, isolated to
/// the main actor, for a `@MainActor` class (a view model, a controller) that touches
/// main-actor state in its callbacks. Set it from the main actor (`Socket(delegate:)`,
/// `setDelegate(_:)`, `mainActorDelegate`); its callbacks then run on the main actor
/// (`CallbackQueue.mainActor`) whatever `callbackQueue` says, so the compiler's view (the
/// methods are main-actor isolated) is where they run. Every method is optional, as in
/// `SocketDelegate`, and the same advice on misspelled methods applies.
///
/// The main actor runs callbacks when it is free: a program whose main thread blocks in
/// synchronous code (a `pause()`, a `read(2)`, a synchronous wait) before any `await` never
/// sees them. An `async` main (`@main struct App { static func main() async }`, or top-level
/// code that awaits) or an application framework keeps the main actor running. (On Linux
/// the main actor is the main dispatch queue, served by a thread of libdispatch's pool once
/// an async main has suspended: isolated, one job at a time, but not always the process's
/// first thread.)
///
/// Not offered: `newEventLoop(forConnectionFrom:on:)`, which is asked on the listener's loop
/// thread while the connection waits; connections accepted by a main-actor delegate take the
/// group's next loop.
@MainActor
public protocol MainActorSocketDelegate: AnyObject {
    /// See `SocketDelegate.socket(_:didAcceptNewSocket:)`. The new socket has this delegate.
    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket)
    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError)
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16)
    func socket(_ sock: Socket, didConnectToUnixPath path: String)
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int)
    /// See `SocketDelegate.socket(_:didReadInto:range:withTag:)`; the default calls
    /// `socket(_:didRead:withTag:)` with a copy.
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int)
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int)
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int)
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int)
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double
    func socketDidCloseReadStream(_ sock: Socket)
    func socketDidSecure(_ sock: Socket)
    /// See `SocketDelegate.socket(_:didReceiveTrust:completionHandler:)`.
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void)
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int)
    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int)
    /// See `SocketDelegate.socket(_:didCancelReadWithTag:unreadBytes:)`.
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int)
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?)
}

extension MainActorSocketDelegate {
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

/// Lets a main-actor delegate be driven by `SwiftDelegateReceiver`: a `SocketDelegate` that
/// forwards each call to it. Only ever called on the main actor: the receiver that holds it
/// pins the socket's callbacks there (`SocketFront.setReceiver`), which is what makes
/// `assumeIsolated` true (it would stop the program, not race, if that were broken).
final class MainActorSocketDelegateAdapter: SocketDelegate, @unchecked Sendable {
    /// Held weakly, as every delegate is; read only on the main actor.
    weak var target: MainActorSocketDelegate?

    init(_ target: MainActorSocketDelegate) { self.target = target }

    /// What `body` returned, nil when the target has gone.
    @discardableResult
    private func onMain<Result: Sendable>(_ body: @MainActor (MainActorSocketDelegate) -> Result) -> Result? {
        MainActor.assumeIsolated {
            guard let target else { return nil }
            return body(target)
        }
    }

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        onMain { $0.socket(listener, didAcceptNewSocket: newSocket) }
    }
    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) {
        onMain { $0.socket(listener, didPauseAcceptingWithError: error) }
    }
    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        onMain { $0.socket(sock, didConnectToHost: host, port: port) }
    }
    func socket(_ sock: Socket, didConnectToUnixPath path: String) {
        onMain { $0.socket(sock, didConnectToUnixPath: path) }
    }
    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        onMain { $0.socket(sock, didRead: data, withTag: tag) }
    }
    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int) {
        let borrowed = UncheckedSendable(buffer)
        onMain { $0.socket(sock, didReadInto: borrowed.value, range: range, withTag: tag) }
    }
    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int) {
        onMain { $0.socket(sock, didReadPartialDataOfLength: length, tag: tag) }
    }
    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double {
        onMain { $0.socket(sock, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: bytesDone) } ?? 0
    }
    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) {
        onMain { $0.socket(sock, didWriteDataWithTag: tag) }
    }
    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int) {
        onMain { $0.socket(sock, didWritePartialDataOfLength: length, tag: tag) }
    }
    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double {
        onMain { $0.socket(sock, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: bytesDone) } ?? 0
    }
    func socketDidCloseReadStream(_ sock: Socket) {
        onMain { $0.socketDidCloseReadStream(sock) }
    }
    func socketDidSecure(_ sock: Socket) {
        onMain { $0.socketDidSecure(sock) }
    }
    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) {
        // Nobody left to judge the peer: reject at once rather than wait for the timeout.
        if onMain({ $0.socket(sock, didReceiveTrust: trust, completionHandler: completionHandler) }) == nil {
            completionHandler(false)
        }
    }
    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {
        onMain { $0.socket(sock, writeQueueDidReachHighWatermark: queuedBytes) }
    }
    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {
        onMain { $0.socket(sock, writeQueueDidDrainToLowWatermark: queuedBytes) }
    }
    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) {
        onMain { $0.socket(sock, didCancelReadWithTag: tag, unreadBytes: unreadBytes) }
    }
    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        onMain { $0.socketDidDisconnect(sock, withError: error) }
    }
}
