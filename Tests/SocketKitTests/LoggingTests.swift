// SPDX-License-Identifier: MIT
import Synchronization
import Testing
@testable import SocketKit
#if SwiftLog
import Logging
import SocketKitLogging
#endif

/// What a log handler received, and a way to wait for a record.
final class LogCollector: @unchecked Sendable {
    private let lock = ConditionLock()
    private var records: [LogRecord] = []

    func add(_ record: LogRecord) {
        lock.withLock {
            records.append(record)
            lock.broadcast()
        }
    }

    var all: [LogRecord] { lock.withLock { records } }

    /// The records of `level` and `subsystem` whose message holds every needle.
    func matching(_ level: LogLevel, _ subsystem: LogSubsystem, _ needles: [String]) -> [LogRecord] {
        lock.withLock {
            records.filter { record in
                record.level == level && record.subsystem == subsystem && needles.allSatisfy { record.message.contains($0) }
            }
        }
    }

    /// Waits (at most `timeout` seconds) for such a record.
    func waitFor(_ level: LogLevel, _ subsystem: LogSubsystem, _ needles: [String], timeout: Double = 10) -> Bool {
        let limit = deadline(afterSeconds: timeout)
        return lock.withLock {
            while !records.contains(where: { record in
                record.level == level && record.subsystem == subsystem && needles.allSatisfy { record.message.contains($0) }
            }) {
                if !lock.wait(untilDeadline: limit) { return false }
            }
            return true
        }
    }
}

/// The engine's log: one handler per process, so these tests run one at a time, and other
/// suites' sockets may log meanwhile: each test looks only for records naming what it made.
@Suite("The engine's log", .serialized)
struct LoggingTests {
    /// Connects to a name that cannot resolve and waits for the end: the resolver's and the
    /// connection's records come before `socketDidDisconnect`.
    func connectToNowhere(_ host: String) throws {
        let recorder = Recorder("nowhere")
        let socket = Socket(delegate: recorder)
        try socket.connect(toHost: host, port: 80, timeout: 15)
        #expect(recorder.waitForDisconnect()??.code == .resolution)
    }

    @Test func offByDefaultThenAtTheLevelAsked() throws {
        #expect(SocketKitLog.level == nil)
        let collector = LogCollector()
        defer { SocketKitLog.removeHandler() }

        SocketKitLog.setHandler(level: .info) { collector.add($0) }
        #expect(SocketKitLog.level == .info)
        #expect(throws: SocketError.self) { try Socket.lookupHost("swift-log-test.invalid", port: 80) }
        // On this thread, before lookupHost threw.
        let resolver = collector.matching(.info, .resolver, ["\"swift-log-test.invalid\" did not resolve", "resolution"])
        #expect(resolver.count == 1, "\(collector.all)")

        try connectToNowhere("swift-log-test.invalid")
        #expect(collector.matching(.info, .resolver, ["swift-log-test.invalid"]).count == 2)
        #expect(collector.matching(.debug, .connection, ["swift-log-test.invalid"]).isEmpty)  // below the level

        SocketKitLog.setHandler(level: .debug) { collector.add($0) }
        try connectToNowhere("swift-log-test.invalid")
        #expect(collector.matching(.debug, .connection, ["connecting to swift-log-test.invalid ended", "resolution"]).count == 1)

        SocketKitLog.removeHandler()
        #expect(SocketKitLog.level == nil)
        let before = collector.matching(.info, .resolver, ["swift-log-test.invalid"]).count
        try connectToNowhere("swift-log-test.invalid")
        #expect(collector.matching(.info, .resolver, ["swift-log-test.invalid"]).count == before)
    }

    @Test func aTLSFailureIsLoggedWithOpenSSLsReasonOnBothSides() throws {
        let collector = LogCollector()
        SocketKitLog.setHandler(level: .info) { collector.add($0) }
        defer { SocketKitLog.removeHandler() }
        let pair = try Pair()
        defer { pair.close() }
        // Each side's line names its peer: the ports are read before TLS starts, while both
        // ends are connected (a failed handshake can end them before a later read).
        let clientEnd = "the connection with 127.0.0.1:\(pair.listener.localPort) ended"
        let serverEnd = "the connection with 127.0.0.1:\(pair.client.localPort) ended"
        try pair.server.startTLS(TestCertificates.server("incomplete"))
        try pair.client.startTLS(TestCertificates.client())
        #expect(pair.clientRecorder.waitForDisconnect()??.code == .tlsUnknownIssuer)
        #expect(collector.waitFor(.info, .tls, [clientEnd, "tlsUnknownIssuer", "certificate verify failed",
                                                "unable to get local issuer certificate"]), "\(collector.all)")
        #expect(collector.waitFor(.info, .tls, [serverEnd, "tlsFailed", "alert unknown ca"]), "\(collector.all)")
    }

    @Test func aDelegateThatIsGoneIsLoggedWhenItsEventsAreDropped() throws {
        let collector = LogCollector()
        SocketKitLog.setHandler(level: .debug) { collector.add($0) }
        defer { SocketKitLog.removeHandler() }
        let pair = try Pair()
        defer { pair.close() }
        // The client's delegate goes away (SocketKit holds it weakly); the next event is dropped.
        var gone: Recorder? = Recorder("gone")
        pair.client.setDelegate(gone, callbackQueue: .eventLoop)
        gone = nil
        try pair.client.read(toLength: 3)
        try pair.server.write(Array("abc".utf8))
        #expect(collector.waitFor(.debug, .callbacks, ["delegate is gone", "didRead dropped"]), "\(collector.all)")
    }

    @Test func aHandlerMayRemoveItselfFromInside() throws {
        let calls = Atomic<Int>(0)
        SocketKitLog.setHandler(level: .info) { _ in
            calls.add(1, ordering: .relaxed)
            SocketKitLog.removeHandler()  // does not wait for this very call
        }
        #expect(throws: SocketError.self) { try Socket.lookupHost("swift-log-test.invalid", port: 80) }
        #expect(throws: SocketError.self) { try Socket.lookupHost("swift-log-test.invalid", port: 80) }
        #expect(calls.load(ordering: .relaxed) == 1)
        #expect(SocketKitLog.level == nil)
    }

    #if SwiftLog
    /// A swift-log handler that hands every message to a collector.
    struct CollectingLogHandler: LogHandler {
        let collector: LogCollector
        var logLevel: Logger.Level = .info
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let (level, message, metadata, source) = (event.level, event.message, event.metadata, event.source)
            let ours: LogLevel = switch level {
            case .error, .critical: .error
            case .warning: .warning
            case .info, .notice: .info
            case .debug, .trace: .debug
            }
            guard case .string(let name)? = metadata?["socketkit.subsystem"], let subsystem = LogSubsystem(rawValue: name),
                  source == "SocketKit" else { return }
            collector.add(LogRecord(level: ours, subsystem: subsystem, message: "\(message)"))
        }
    }

    @Test func swiftLogReceivesTheRecordsAtTheLoggersLevel() throws {
        let collector = LogCollector()
        var logger = Logger(label: "socketkit") { _ in CollectingLogHandler(collector: collector) }
        logger.logLevel = .info
        SocketKitLog.forward(to: logger)
        defer { SocketKitLog.removeHandler() }
        #expect(SocketKitLog.level == .info)
        try connectToNowhere("swift-log-bridge-test.invalid")
        #expect(collector.matching(.info, .resolver, ["\"swift-log-bridge-test.invalid\" did not resolve"]).count == 1,
                "\(collector.all)")
        #expect(collector.matching(.debug, .connection, ["swift-log-bridge-test.invalid"]).isEmpty)

        // The logger's level decides, in swift-log's order (notice lies between info and warning).
        for (loggerLevel, expected) in [(Logger.Level.trace, LogLevel.debug), (.debug, .debug), (.notice, .warning),
                                         (.warning, .warning), (.error, .error)] {
            logger.logLevel = loggerLevel
            SocketKitLog.forward(to: logger)
            #expect(SocketKitLog.level == expected, "\(loggerLevel)")
        }
        logger.logLevel = .critical
        SocketKitLog.forward(to: logger)
        #expect(SocketKitLog.level == nil)
        #expect(Logger.Level(LogLevel.debug) == .debug && Logger.Level(LogLevel.error) == .error)
    }
    #endif
}
