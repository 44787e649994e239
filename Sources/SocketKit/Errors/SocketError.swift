// SPDX-License-Identifier: MIT
import Glibc

/// The one error type of SocketKit. Its codes map one-to-one onto the C `SK_ERR_*` values
/// and the Python exception classes.
///
/// `osError` carries the OS `errno` for `.system` errors, the resolver's `EAI_*` value for
/// `.resolution` errors, and 0 otherwise.
public struct SocketError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong. Raw values are the C error codes (negative; 0 is success).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        // The codes themselves (`.badConfig`, `.readTimeout`, ...) and their names and
        // summaries are generated from docs/EVENTS_AND_ERRORS.md: SocketErrorCodes.swift.

        /// Every code, in raw-value order; the C and Python tables are checked against it.
        public static let all: [Code] = table.compactMap { $0.name == nil ? nil : $0.code }

        /// The name of the code, e.g. `"readTimeout"`.
        public var name: String {
            Code.entry(self)?.name.map { "\($0)" } ?? "code(\(rawValue))"
        }

        /// A short sentence describing the code (what `sk_strerror` returns).
        public var summary: String {
            Code.entry(self).map { "\($0.summary)" } ?? "unknown error"
        }

        /// The table's row for `code`, if it has one.
        static func entry(_ code: Code) -> TableEntry? {
            table.first { $0.code == code }
        }

        public var description: String { name }
    }

    public let code: Code
    public let osError: Int32
    public let message: String

    public init(_ code: Code, osError: Int32 = 0, _ message: String? = nil) {
        self.code = code
        self.osError = osError
        self.message = message ?? code.summary
    }

    /// An error for the current `errno` (read at call time), naming the failed call.
    static func lastSystemError(_ call: String) -> SocketError {
        systemError(errno, call)
    }

    static func systemError(_ number: Int32, _ call: String) -> SocketError {
        SocketError(.system, osError: number, "\(call): \(String(cString: strerror(number)))")
    }

    public var description: String {
        osError != 0 ? "\(code.name) (\(osError)): \(message)" : "\(code.name): \(message)"
    }
}

extension SocketError.Code {
    /// A TLS error (`SK_ERR_TLS_*`, `.tls…`).
    var isTLS: Bool { SocketError.Code.entry(self)?.cName.description.hasPrefix("SK_ERR_TLS_") ?? false }
}

extension SocketError {
    /// How the log reports a session that ended with this error: a TLS handshake or
    /// verification that failed is `info` (with OpenSSL's reason in the message); any other
    /// end, a peer closing without close_notify included (common, and reported to the
    /// delegate anyway), is `debug`.
    var sessionEndLogLevel: LogLevel {
        switch code {
        case .tlsPeerClosed, .tlsTruncated: return .debug
        default: return code.isTLS ? .info : .debug
        }
    }
}
