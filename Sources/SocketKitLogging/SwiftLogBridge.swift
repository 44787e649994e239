// SPDX-License-Identifier: MIT
#if SwiftLog
import Logging
import SocketKit

// The bridge from SocketKit's log to swift-log, the Swift server ecosystem's logging API.
// A separate module and product, built only with the package's SwiftLog trait, so that the
// SocketKit module, and libsocketkit.so that C and Python load, depend on nothing but libc
// and OpenSSL; only a program that asks for this bridge has swift-log resolved and built.

extension SocketKitLog {
    /// Sends SocketKit's records to `logger`, those its level (`logger.logLevel` when this
    /// is called: call it again after changing it) lets through: `.trace` and `.debug` take
    /// every record, `.info` from `.info` on, `.notice` and `.warning` warnings and errors,
    /// `.error` errors alone; `.critical` none, so logging stays off. Each record carries
    /// the metadata `socketkit.subsystem` ("accept", "connection", "tls", "resolver",
    /// "callbacks") and the source "SocketKit". Replaces any handler set before (the C or
    /// Python face's included); `SocketKitLog.removeHandler()` stops it.
    ///
    /// The logger's handler is called on SocketKit's threads (see `SocketKitLog`).
    public static func forward(to logger: Logger = Logger(label: "socketkit")) {
        // The most detailed of SocketKit's levels that the logger would not drop.
        guard let level = LogLevel.allCases.filter({ Logger.Level($0) >= logger.logLevel }).max() else {
            removeHandler()
            return
        }
        setHandler(level: level) { record in
            logger.log(level: Logger.Level(record.level), "\(record.message)",
                       metadata: ["socketkit.subsystem": "\(record.subsystem.rawValue)"],
                       source: "SocketKit")
        }
    }
}

extension Logger.Level {
    /// The swift-log level of a SocketKit record.
    public init(_ level: LogLevel) {
        switch level {
        case .error: self = .error
        case .warning: self = .warning
        case .info: self = .info
        case .debug: self = .debug
        }
    }
}
#endif
