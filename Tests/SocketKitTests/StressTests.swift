// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Many connections at once, each carrying real data.
@Suite("Load")
struct StressTests {
    /// Raises the soft descriptor limit to what a test needs (bounded by the hard limit).
    static func ensureDescriptors(_ needed: Int) throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < rlim_t(needed) {
            guard limit.rlim_max >= rlim_t(needed) else {
                throw TestFailure("needs \(needed) descriptors; the hard limit is \(limit.rlim_max)")
            }
            limit.rlim_cur = rlim_t(needed)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
    }

    final class Echo: SocketDelegate, @unchecked Sendable {
        private let lock = Lock()
        private var connections: [Socket] = []
        func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
            lock.withLock { connections.append(newSocket) }
            try? newSocket.read()
        }
        func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
            try? sock.write(data)
            try? sock.read()
        }
        func closeAll() {
            for connection in lock.withLock({ connections }) { connection.disconnect() }
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func aThousandConcurrentConnectionsEachEchoSixtyFourKibibytesIntact() throws {
        let connections = 1000
        try Self.ensureDescriptors(2 * connections + 256)
        // Its own loops: saturating the default ones would starve the tests running beside it.
        let group = EventLoopGroup(loopCount: 2)
        defer { try? group.shutdown() }
        let echo = Echo()
        let listener = Socket(delegate: echo, eventLoop: group.next())
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer {
            listener.disconnect()
            echo.closeAll()
        }
        let recorder = Recorder("clients")
        var clients: [Socket] = []
        var expected: [[UInt8]] = []
        for index in 0..<connections {
            let client = Socket(delegate: recorder, eventLoop: group.next())
            let payload = pattern(64 * 1024, seed: UInt8(truncatingIfNeeded: index))
            try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 30)
            try client.write(payload, tag: index)
            try client.read(toLength: payload.count, timeout: 60, tag: index)
            clients.append(client)
            expected.append(payload)
        }
        #expect(recorder.wait(timeout: 90) { $0.lazy.filter { if case .read = $0 { return true }; return false }.count == connections })
        var intact = 0
        for (bytes, tag) in recorder.reads() where bytes == expected[tag] { intact += 1 }
        #expect(intact == connections)
        let early = recorder.events.filter { $0.isDisconnect }
        #expect(early.isEmpty, "\(early.prefix(3))")
        for client in clients { client.disconnect() }
        #expect(recorder.wait { $0.filter(\.isDisconnect).count == connections })
    }
}
