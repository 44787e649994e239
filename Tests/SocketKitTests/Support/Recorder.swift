// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// How long a test waits for an event that must come: only a failing test waits this long.
/// The tests run in parallel and share the default loops, which some of them hold for a
/// while (`EndOfStreamTests.holdingTheLoop`, `perform` gates); on a loaded machine 10 s was
/// too short for a datagram to arrive (UdpTests.oversizedDatagramsAreReportedAsTruncated).
let eventWaitSeconds: Double = 30

/// A delegate that records every callback in order and lets a test wait for what it
/// expects (a condition variable with a deadline: no sleeps). It also checks the callback
/// contract as it goes: callbacks of one socket never overlap, and nothing follows
/// `socketDidDisconnect`.
final class Recorder: SocketDelegate, @unchecked Sendable {
    enum Event: Equatable, CustomStringConvertible {
        case connected(host: String, port: UInt16)
        case connectedUnix(path: String)
        case accepted
        case pausedAccepting(SocketError.Code)
        case read([UInt8], tag: Int)
        case readInto(range: Range<Int>, tag: Int)
        case readPartial(length: Int, tag: Int)
        case readTimeout(tag: Int, elapsed: Double, bytesDone: Int)
        case wrote(tag: Int)
        case wrotePartial(length: Int, tag: Int)
        case writeTimeout(tag: Int, elapsed: Double, bytesDone: Int)
        case closedReadStream
        case highWatermark(Int)
        case lowWatermark(Int)
        case disconnected(SocketError?)
        case secured
        case trustAsked(chainLength: Int, verification: SocketError.Code?)
        case cancelledRead(tag: Int, unreadBytes: Int)

        var description: String {
            switch self {
            case .read(let bytes, let tag): return "read(\(bytes.count) bytes, tag: \(tag))"
            case .connected(let host, let port): return "connected(\(host), \(port))"
            case .connectedUnix(let path): return "connectedUnix(\(path))"
            case .accepted: return "accepted"
            case .pausedAccepting(let code): return "pausedAccepting(\(code))"
            case .readInto(let range, let tag): return "readInto(\(range), tag: \(tag))"
            case .readPartial(let length, let tag): return "readPartial(\(length), tag: \(tag))"
            case .readTimeout(let tag, let elapsed, let done): return "readTimeout(tag: \(tag), elapsed: \(elapsed), bytesDone: \(done))"
            case .wrote(let tag): return "wrote(tag: \(tag))"
            case .wrotePartial(let length, let tag): return "wrotePartial(\(length), tag: \(tag))"
            case .writeTimeout(let tag, let elapsed, let done): return "writeTimeout(tag: \(tag), elapsed: \(elapsed), bytesDone: \(done))"
            case .closedReadStream: return "closedReadStream"
            case .highWatermark(let n): return "highWatermark(\(n))"
            case .lowWatermark(let n): return "lowWatermark(\(n))"
            case .disconnected(let error): return "disconnected(\(error.map { "\($0)" } ?? "nil"))"
            case .secured: return "secured"
            case .trustAsked(let length, let code): return "trustAsked(\(length) certificates, \(code.map { "\($0)" } ?? "verified"))"
            case .cancelledRead(let tag, let unread): return "cancelledRead(tag: \(tag), unreadBytes: \(unread))"
            }
        }

        var isDisconnect: Bool {
            if case .disconnected = self { return true }
            return false
        }
    }

    let name: String
    private let lock = ConditionLock()
    private var log: [Event] = []
    private var acceptedSockets: [Socket] = []
    private var socketsSeen = Set<ObjectIdentifier>()
    private let running = Atomic<Int>(0)
    private let overlaps = Atomic<Int>(0)
    private let afterDisconnect = Atomic<Int>(0)
    private var disconnectedSockets = Set<ObjectIdentifier>()
    private var threads = Set<UInt>()
    private var onLoopThread = 0

    /// Seconds to extend a timed-out read or write by (0: let it fail). Set before use.
    nonisolated(unsafe) var readTimeoutExtensions: [Double] = []
    nonisolated(unsafe) var writeTimeoutExtensions: [Double] = []
    /// Hooks, run inside the callback after it is recorded. Set before use.
    nonisolated(unsafe) var onAccept: ((Socket, Socket) -> Void)? = nil
    nonisolated(unsafe) var onConnect: ((Socket) -> Void)? = nil
    nonisolated(unsafe) var onRead: ((Socket, [UInt8], Int) -> Void)? = nil
    nonisolated(unsafe) var onWrite: ((Socket, Int) -> Void)? = nil
    nonisolated(unsafe) var onDisconnect: ((Socket, SocketError?) -> Void)? = nil
    nonisolated(unsafe) var loopForConnections: EventLoop? = nil
    /// Manual trust: called with the trust and the completion handler (nil: answer yes).
    nonisolated(unsafe) var onTrust: ((Socket, TLSTrust, @escaping @Sendable (Bool) -> Void) -> Void)? = nil
    nonisolated(unsafe) var onSecure: ((Socket) -> Void)? = nil
    nonisolated(unsafe) var onCancelRead: ((Socket, Int, Int) -> Void)? = nil

    init(_ name: String = "recorder") {
        self.name = name
    }

    // MARK: Waiting

    var events: [Event] { lock.withLock { log } }
    var accepted: [Socket] { lock.withLock { acceptedSockets } }

    /// Waits until `predicate` holds for the events so far; false on timeout.
    @discardableResult
    func wait(timeout: Double = eventWaitSeconds, until predicate: ([Event]) -> Bool) -> Bool {
        let limit = deadline(afterSeconds: timeout)
        lock.lock()
        defer { lock.unlock() }
        while !predicate(log) {
            if !lock.wait(untilDeadline: limit) { return predicate(log) }
        }
        return true
    }

    /// Wakes waiters whose predicate looks at something besides the events.
    func notify() {
        lock.withLock { lock.broadcast() }
    }

    /// Waits for `socketDidDisconnect` and returns its error (`.some(nil)` for a clean close,
    /// nil on timeout).
    func waitForDisconnect(timeout: Double = eventWaitSeconds) -> SocketError?? {
        var result: SocketError?? = nil
        wait(timeout: timeout) { events in
            for event in events {
                if case .disconnected(let error) = event {
                    result = .some(error)
                    return true
                }
            }
            return false
        }
        return result
    }

    func waitForConnect(timeout: Double = eventWaitSeconds) -> Bool {
        wait(timeout: timeout) { events in
            events.contains { if case .connected = $0 { return true }; if case .connectedUnix = $0 { return true }; return false }
        }
    }

    func waitForAccepted(_ count: Int, timeout: Double = eventWaitSeconds) -> [Socket] {
        wait(timeout: timeout) { events in events.filter { $0 == .accepted }.count >= count }
        return accepted
    }

    /// All bytes read so far, in order.
    var bytesRead: [UInt8] {
        events.flatMap { event -> [UInt8] in
            if case .read(let bytes, _) = event { return bytes }
            return []
        }
    }

    func waitForBytes(_ count: Int, timeout: Double = eventWaitSeconds) -> [UInt8] {
        wait(timeout: timeout) { events in
            events.reduce(0) { total, event in
                if case .read(let bytes, _) = event { return total + bytes.count }
                return total
            } >= count
        }
        return bytesRead
    }

    func reads() -> [(bytes: [UInt8], tag: Int)] {
        events.compactMap { event in
            if case .read(let bytes, let tag) = event { return (bytes, tag) }
            return nil
        }
    }

    /// Callbacks that ran at the same time as another of the same recorder (must stay 0 for
    /// recorders that serve one socket).
    var overlappingCallbacks: Int { overlaps.load(ordering: .relaxed) }
    /// Callbacks that arrived after `socketDidDisconnect` of the same socket (must stay 0).
    var callbacksAfterDisconnect: Int { afterDisconnect.load(ordering: .relaxed) }

    // MARK: Recording

    /// The threads callbacks ran on, and how many ran on their socket's loop thread.
    var callbackThreads: Set<UInt> { lock.withLock { threads } }
    var callbacksOnLoopThread: Int { lock.withLock { onLoopThread } }

    private func record(_ sock: Socket, _ event: Event) {
        let key = ObjectIdentifier(sock)
        let onLoop = sock.eventLoop.inEventLoop
        lock.withLock {
            threads.insert(currentThreadIdentity())
            if onLoop { onLoopThread += 1 }
            switch event {
            case .connected, .connectedUnix:
                disconnectedSockets.remove(key) // a new session of a reused socket
            default:
                if disconnectedSockets.contains(key) { afterDisconnect.add(1, ordering: .relaxed) }
            }
            if event.isDisconnect { disconnectedSockets.insert(key) }
            log.append(event)
            lock.broadcast()
        }
    }

    private func callback<Result>(_ body: () -> Result) -> Result {
        if running.add(1, ordering: .acquiringAndReleasing).newValue > 1 {
            overlaps.add(1, ordering: .relaxed)
        }
        defer { running.subtract(1, ordering: .acquiringAndReleasing) }
        return body()
    }

    // MARK: SocketDelegate

    func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? {
        loopForConnections
    }

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        callback {
            lock.withLock { acceptedSockets.append(newSocket) }
            onAccept?(listener, newSocket)
            record(listener, .accepted)
        }
    }

    func socket(_ listener: Socket, didPauseAcceptingWithError error: SocketError) {
        callback { record(listener, .pausedAccepting(error.code)) }
    }

    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
        callback {
            record(sock, .connected(host: host, port: port))
            onConnect?(sock)
        }
    }

    func socket(_ sock: Socket, didConnectToUnixPath path: String) {
        callback {
            record(sock, .connectedUnix(path: path))
            onConnect?(sock)
        }
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        callback {
            record(sock, .read(data, tag: tag))
            onRead?(sock, data, tag)
        }
    }

    func socket(_ sock: Socket, didReadInto buffer: UnsafeMutableRawBufferPointer, range: Range<Int>, withTag tag: Int) {
        callback { record(sock, .readInto(range: range, tag: tag)) }
    }

    func socket(_ sock: Socket, didReadPartialDataOfLength length: Int, tag: Int) {
        callback { record(sock, .readPartial(length: length, tag: tag)) }
    }

    func socket(_ sock: Socket, shouldTimeoutReadWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double {
        callback {
            record(sock, .readTimeout(tag: tag, elapsed: elapsed, bytesDone: bytesDone))
            return lock.withLock { readTimeoutExtensions.isEmpty ? 0 : readTimeoutExtensions.removeFirst() }
        }
    }

    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) {
        callback {
            record(sock, .wrote(tag: tag))
            onWrite?(sock, tag)
        }
    }

    func socket(_ sock: Socket, didWritePartialDataOfLength length: Int, tag: Int) {
        callback { record(sock, .wrotePartial(length: length, tag: tag)) }
    }

    func socket(_ sock: Socket, shouldTimeoutWriteWithTag tag: Int, elapsed: Double, bytesDone: Int) -> Double {
        callback {
            record(sock, .writeTimeout(tag: tag, elapsed: elapsed, bytesDone: bytesDone))
            return lock.withLock { writeTimeoutExtensions.isEmpty ? 0 : writeTimeoutExtensions.removeFirst() }
        }
    }

    func socketDidCloseReadStream(_ sock: Socket) {
        callback { record(sock, .closedReadStream) }
    }

    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {
        callback { record(sock, .highWatermark(queuedBytes)) }
    }

    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {
        callback { record(sock, .lowWatermark(queuedBytes)) }
    }

    func socketDidSecure(_ sock: Socket) {
        callback {
            record(sock, .secured)
            onSecure?(sock)
        }
    }

    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) {
        callback {
            record(sock, .trustAsked(chainLength: trust.chain.count, verification: trust.verificationError?.code))
            if let onTrust {
                onTrust(sock, trust, completionHandler)
            } else {
                completionHandler(true)
            }
        }
    }

    /// Waits for `socketDidSecure`; false on timeout or after a disconnect.
    func waitForSecure(timeout: Double = eventWaitSeconds) -> Bool {
        wait(timeout: timeout) { events in events.contains(.secured) || events.contains { $0.isDisconnect } }
        return events.contains(.secured)
    }

    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) {
        callback {
            record(sock, .cancelledRead(tag: tag, unreadBytes: unreadBytes))
            onCancelRead?(sock, tag, unreadBytes)
        }
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        callback {
            record(sock, .disconnected(error))
            onDisconnect?(sock, error)
        }
    }
}
