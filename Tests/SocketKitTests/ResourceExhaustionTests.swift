// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A listener out of descriptors must not spin and must serve again by itself. The server
/// runs in its own process (the fd limit is process-wide) under `ulimit -n 64`.
@Suite("Resource exhaustion", .serialized)
struct ResourceExhaustionTests {
    /// The echo server built next to this test bundle.
    static var echoServerPath: String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        let executable = length > 0 ? string(fromCString: Array(buffer[0..<length]) + [0]) : ""
        var directory = executable
        while directory.count > 1 && !directory.hasSuffix("/") { directory.removeLast() }
        return directory + "socketkit-echo"
    }

    final class ChildProcess {
        let pid: pid_t
        let output: Int32
        private var pending: [UInt8] = []

        init(shellCommand: String) throws {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else { throw TestFailure("pipe") }
            _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
            posix_spawn_file_actions_addclose(&actions, ends[1])
            let arguments: [UnsafeMutablePointer<CChar>?] = ["/bin/sh", "-c", shellCommand].map { (text: String) in strdup(text) }
            defer { for argument in arguments { free(argument) } }
            var argv: [UnsafeMutablePointer<CChar>?] = arguments + [nil]
            var environment: [UnsafeMutablePointer<CChar>?] = [nil]
            // The spawning thread may block signals (test runners' worker threads do), and a
            // child inherits that mask: start it with none blocked so SIGTERM works.
            var attributes = posix_spawnattr_t()
            posix_spawnattr_init(&attributes)
            defer { posix_spawnattr_destroy(&attributes) }
            var noSignals = sigset_t()
            sigemptyset(&noSignals)
            posix_spawnattr_setsigmask(&attributes, &noSignals)
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
            var child = pid_t()
            let result = posix_spawn(&child, "/bin/sh", &actions, &attributes, &argv, &environment)
            close(ends[1])
            guard result == 0 else {
                close(ends[0])
                throw TestFailure("posix_spawn: \(result)")
            }
            pid = child
            output = ends[0]
        }

        /// The next line of standard output, waiting at most `timeout` seconds.
        func readLine(timeout: Double) -> String? {
            let limit = deadline(afterSeconds: timeout)
            while true {
                if let newline = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[..<newline], as: UTF8.self)
                    pending.removeSubrange(...newline)
                    return line
                }
                let now = monotonicNanoseconds()
                guard now < limit else { return nil }
                var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, Int32((limit - now) / 1_000_000) + 1) > 0 else { return nil }
                var chunk = [UInt8](repeating: 0, count: 4096)
                let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
                guard count > 0 else { return nil }
                pending += chunk[0..<count]
            }
        }

        /// User plus system CPU seconds used so far, from /proc.
        var cpuSeconds: Double {
            guard let file = fopen("/proc/\(pid)/stat", "r") else { return -1 }
            defer { fclose(file) }
            var line = [CChar](repeating: 0, count: 2048)
            guard fgets(&line, Int32(line.count), file) != nil else { return -1 }
            let text = string(fromCString: line)
            guard let close = text.lastIndex(of: ")") else { return -1 }
            let fields = text[text.index(after: close)...].split(separator: " ")
            // After the command: state is field 3, utime 14 and stime 15 (1-based).
            guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return -1 }
            return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
        }

        /// SIGTERM, then SIGKILL if it has not exited within three seconds.
        func stop() {
            kill(pid, SIGTERM)
            var status: Int32 = 0
            let limit = deadline(afterSeconds: 3)
            while waitpid(pid, &status, WNOHANG) == 0 {
                if monotonicNanoseconds() > limit {
                    kill(pid, SIGKILL)
                    waitpid(pid, &status, 0)
                    break
                }
                var idle = pollfd(fd: -1, events: 0, revents: 0)
                _ = poll(&idle, 1, 10)
            }
            close(output)
        }
    }

    @Test(.timeLimit(.minutes(2)))
    func aListenerOutOfDescriptorsBacksOffAndServesAgain() throws {
        let server = Self.echoServerPath
        guard access(server, X_OK) == 0 else {
            throw TestFailure("\(server) is missing: build everything first (swift build --build-tests)")
        }
        let child = try ChildProcess(shellCommand: "ulimit -n 64 && exec '\(server)' --port 0")
        defer { child.stop() }
        let banner = try #require(child.readLine(timeout: 10))
        let port = try #require(UInt16(banner.split(separator: " ").last ?? ""))

        var clients: [RawSocket] = []
        for _ in 0..<200 {
            let client = try RawSocket.connect(to: "127.0.0.1", port: port)
            try client.send("ping\n")
            clients.append(client)
        }
        defer { for client in clients { client.close() } }

        // The delegate hears that accepting paused ...
        let notice = try #require(child.readLine(timeout: 10))
        #expect(notice.hasPrefix("accept paused"))
        #expect(notice.contains("(\(EMFILE))"), "\(notice)")

        // ... and while saturated the server sleeps instead of spinning.
        let before = child.cpuSeconds
        var idle = pollfd(fd: -1, events: 0, revents: 0)
        _ = poll(&idle, 1, 1000) // a one-second measurement window
        let used = child.cpuSeconds - before
        #expect(used >= 0 && used < 0.2, "server used \(used) s of CPU in 1 s while out of descriptors")

        // Close served clients round after round: every client gets served in the end.
        var pending = Set(clients.indices)
        var rounds = 0
        let limit = deadline(afterSeconds: 60)
        while !pending.isEmpty && monotonicNanoseconds() < limit {
            var descriptors = pending.sorted().map { pollfd(fd: clients[$0].fd, events: Int16(POLLIN), revents: 0) }
            guard poll(&descriptors, nfds_t(descriptors.count), 10_000) > 0 else { break }
            rounds += 1
            for descriptor in descriptors where descriptor.revents & Int16(POLLIN) != 0 {
                let index = clients.firstIndex { $0.fd == descriptor.fd }!
                #expect(try clients[index].receive(exactly: 5) == bytes("ping\n"))
                clients[index].close()
                pending.remove(index)
            }
        }
        #expect(pending.isEmpty, "\(pending.count) clients never served")
        #expect(rounds >= 2, "the server could not have served 200 clients at once under ulimit -n 64")
    }
}
