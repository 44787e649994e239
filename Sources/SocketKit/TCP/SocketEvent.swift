// SPDX-License-Identifier: MIT
/// The bytes a completed read hands to its callback.
enum ReadPayload {
    /// A view of the loop's read buffer or the socket's prebuffer: valid only while the
    /// callback runs. Delivery on another thread copies it first.
    case borrowed(UnsafeRawBufferPointer)
    /// Bytes gathered over several passes (the array is handed over, not copied).
    case owned([UInt8])
    /// The read went into the caller's memory; `range` is where its bytes landed.
    case callerBuffer(UnsafeMutableRawBufferPointer, range: Range<Int>)
}

/// Everything a socket reports to its user, in the order it happened. The engine produces
/// these on the loop thread; `Socket` hands them to the delegate on its callback queue.
enum SocketEvent: RoutedEvent {
    /// `proxied`: through a proxy, the target as given to connect (`peer` is the proxy).
    case didConnect(peer: SocketAddress, proxied: ProxiedTarget? = nil)
    /// Produced by the engine; `Socket` turns it into `didAcceptSocket` before delivery.
    case didAccept(TCPSocketCore)
    case didAcceptSocket(Socket)
    case didNotAccept(SocketError)
    case didRead(ReadPayload, tag: Int)
    case didReadPartial(length: Int, tag: Int)
    case shouldTimeoutRead(tag: Int, elapsed: Double, bytesDone: Int, question: UInt64)
    case didWrite(tag: Int)
    case didWritePartial(length: Int, tag: Int)
    case shouldTimeoutWrite(tag: Int, elapsed: Double, bytesDone: Int, question: UInt64)
    case didCloseReadStream
    /// The TLS handshake finished (and manual trust, if any, said yes).
    case didSecure
    /// Manual trust evaluation: answer with `Socket.answerTrust(question:accept:)`.
    case didReceiveTrust(TLSTrust, question: UInt64)
    case didReachWriteHighWatermark(queuedBytes: Int)
    case didDrainToWriteLowWatermark(queuedBytes: Int)
    case didDisconnect(SocketError?)
    /// The answer to `Socket.cancelRead(withTag:)`; `unreadBytes` are those SocketKit holds
    /// ahead of the next read.
    case didCancelRead(tag: Int, unreadBytes: Int)

    /// The same event with no borrowed memory, for delivery after the current loop step.
    func owned() -> SocketEvent {
        if case .didRead(.borrowed(let bytes), let tag) = self {
            return .didRead(.owned(Array(bytes)), tag: tag)
        }
        return self
    }
}
