// SPDX-License-Identifier: MIT
import Glibc
import Synchronization

/// How serious a log record is. A handler set for one level receives that level and every
/// more serious one.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// SocketKit cannot do what it was asked: a thread it needs did not start.
    case error = 1
    /// Service is degraded: a listener out of descriptors stopped accepting for a while.
    case warning = 2
    /// A connection failed: a TLS handshake or verification (with OpenSSL's reason), a
    /// name that did not resolve; a listener accepting again.
    case info = 3
    /// Every connection that ended with an error, and why; events dropped because their
    /// socket had no delegate; each retry of a paused listener.
    case debug = 4

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .error: return "error"
        case .warning: return "warning"
        case .info: return "info"
        case .debug: return "debug"
        }
    }
}

/// The part of SocketKit a record comes from; also its name in the C API (`subsystem`), in
/// Python (the logger `socketkit.<subsystem>`) and in swift-log (the `socketkit.subsystem`
/// metadata).
public enum LogSubsystem: String, Sendable, CaseIterable {
    /// Listeners accepting connections.
    case accept
    /// Connections: attempts and ends.
    case connection
    /// TLS handshakes and sessions.
    case tls
    /// Host name resolution.
    case resolver
    /// Delivering events to delegates.
    case callbacks
}

/// One message of the engine.
public struct LogRecord: Sendable, CustomStringConvertible {
    public let level: LogLevel
    public let subsystem: LogSubsystem
    public let message: String

    public var description: String { "socketkit.\(subsystem.rawValue) \(level): \(message)" }
}

/// The engine's log: off until a handler is set. One handler per process, whichever face
/// sets it (`SocketKitLog.setHandler`, C's `sk_log_set_callback`, Python's
/// `socketkit.enable_logging`, the swift-log bridge of `SocketKitLogging`).
///
/// Off, logging costs one relaxed atomic load at each place that could log, and none of
/// those places is on the path of a read or a write: they are where connections fail or
/// end, where a listener backs off, where a name does not resolve.
///
/// The handler runs on the thread where the engine met what it reports: an event loop
/// thread, a resolver thread, a callback queue's thread, or a caller's thread inside a
/// SocketKit call; on several threads at once, possibly. No SocketKit lock is held while it
/// runs (a delegate callback of that thread may be running around it). It must be quick (a
/// loop thread serving many sockets waits for it) and must not call into SocketKit: what
/// the engine would log on the same thread while the handler runs is dropped rather than
/// handed to it again, and setting a handler from inside it does not wait for itself.
public enum SocketKitLog {
    /// The most detailed level the handler receives; nil while logging is off (the default).
    public static var level: LogLevel? {
        LogLevel(rawValue: Int(EngineLog.threshold.load(ordering: .relaxed)))
    }

    /// Sends the engine's records of `level` and more serious ones to `handler`, replacing
    /// the handler set before. Once this returns, the previous handler is not running on any
    /// other thread and is not called again.
    public static func setHandler(level: LogLevel, _ handler: @escaping @Sendable (LogRecord) -> Void) {
        EngineLog.hub.install(EngineLog.Handler(handler), level: level)
    }

    /// Turns logging off (the default). Once this returns, the handler is not running on any
    /// other thread and is not called again.
    public static func removeHandler() {
        EngineLog.hub.install(nil, level: nil)
    }
}

/// The engine's side of the log: the level check every log site makes, and the handler.
enum EngineLog {
    /// The most detailed level wanted (a `LogLevel` raw value); 0 when off. The only thing
    /// a log site reads when logging is off.
    static let threshold = Atomic<Int>(0)

    static let hub = Hub()

    /// True when a record of `level` would reach a handler: check it before building a
    /// message that costs anything.
    @inline(__always)
    static func wants(_ level: LogLevel) -> Bool {
        threshold.load(ordering: .relaxed) >= level.rawValue
    }

    /// Logs `message()` (built only when `level` is wanted).
    @inline(__always)
    static func log(_ level: LogLevel, _ subsystem: LogSubsystem, _ message: @autoclosure () -> String) {
        if wants(level) {
            hub.deliver(LogRecord(level: level, subsystem: subsystem, message: message()))
        }
    }

    /// The case name of an event (`didRead`), for records about it.
    static func name(of event: Any) -> String {
        String(String(describing: event).prefix { $0 != "(" })
    }

    /// An installed handler and the threads running it.
    final class Handler: @unchecked Sendable {
        let body: @Sendable (LogRecord) -> Void
        /// Threads inside `body` now (under the hub's lock): a thread appears once per call
        /// it is in, and a record raised by a thread already in it is dropped.
        var runningThreads: [UInt] = []

        init(_ body: @escaping @Sendable (LogRecord) -> Void) {
            self.body = body
        }
    }

    /// The handler slot. Its lock is held only to take or give back the handler, never
    /// around the handler itself; replacing it waits (on the lock's condition) until no
    /// other thread is still in the previous one.
    final class Hub: @unchecked Sendable {
        private let lock = ConditionLock()
        private var current: Handler? = nil

        @inline(never)
        func deliver(_ record: LogRecord) {
            let thread = currentThreadIdentity()
            let handler = lock.withLock { () -> Handler? in
                // A level lowered since the caller's check: honour it.
                guard let current, EngineLog.wants(record.level),
                      !current.runningThreads.contains(thread) else { return nil }
                current.runningThreads.append(thread)
                return current
            }
            guard let handler else { return }
            handler.body(record)
            lock.withLock {
                if let index = handler.runningThreads.firstIndex(of: thread) {
                    handler.runningThreads.remove(at: index)
                }
                lock.signal()  // an `install` may be waiting for this thread to leave
            }
        }

        func install(_ handler: Handler?, level: LogLevel?) {
            let thread = currentThreadIdentity()
            lock.withLock {
                let previous = current
                current = handler
                EngineLog.threshold.store(handler == nil ? 0 : (level?.rawValue ?? 0), ordering: .relaxed)
                // Called from inside the previous handler, this thread's own call is not
                // waited for: it is the caller.
                while let previous, previous.runningThreads.contains(where: { $0 != thread }) {
                    lock.wait()
                }
            }
        }
    }
}
