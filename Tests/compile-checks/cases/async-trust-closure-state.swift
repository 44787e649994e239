// SPDX-License-Identifier: MIT
// Closures the async API runs on its own (the trust evaluator, called from a loop thread's
// callback) are @Sendable: unprotected state cannot be captured.
// expect-error: capture of 'log' with non-Sendable type 'Log' in a '@Sendable' closure
import SocketKit

final class Log {
    var entries: [String] = []
}

func connect(log: Log) async throws -> AsyncSocket {
    var settings = TLSSettings()
    settings.manualTrustEvaluation = true
    return try await AsyncSocket.connect(toHost: "127.0.0.1", port: 443, tls: settings, evaluateTrust: { trust in
        log.entries.append("asked about \(trust.peerName ?? "?")")
        return false
    })
}
