// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Listening on descriptors made elsewhere, and systemd's socket activation (issue 32,
/// item 4).
@Suite("Adopted listeners")
struct AdoptedListenerTests {
    /// The descriptor is still open (and so still the caller's).
    static func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) >= 0 }

    /// Connects a raw client to `port` and checks the listener hands over a connection that
    /// echoes a line.
    static func checkServes(_ listenerRecorder: Recorder, port: UInt16, host: String = "127.0.0.1",
                            accepted: Int) throws {
        let client = try RawSocket.connect(to: host, port: port)
        defer { client.close() }
        let server = try #require(listenerRecorder.waitForAccepted(accepted).last)
        try client.send("ping\n")
        try server.read(toData: Socket.lf, tag: 1)
        #expect(listenerRecorder.wait { events in events.contains(.read(bytes("ping\n"), tag: 1)) })
        server.disconnect()
    }

    @Test func aListeningDescriptorIsAdoptedAndClosedWhenTheListenerStops() throws {
        let raw = try RawSocket.listen()
        let port = raw.localPort
        let fd = raw.detach()
        let (listener, recorder) = recordedSocket("listener")
        recorder.onAccept = { [weak recorder] _, child in child.delegate = recorder }  // weak: no cycle through its own closure
        try listener.accept(onDescriptors: [fd])
        #expect(listener.isAccepting && listener.localPort == port && listener.isIPv4)
        #expect(fcntl(fd, F_GETFL) & O_NONBLOCK != 0)
        try Self.checkServes(recorder, port: port, accepted: 1)
        listener.disconnect()
        #expect(throws: (any Error).self) { try RawSocket.connect(port: port) }
    }

    @Test func boundDescriptorsOfBothFamiliesAreMadeToListenByOneListener() throws {
        let ipv4 = try RawSocket.boundNotListening()
        let ipv6 = try RawSocket.boundNotListening(host: "::1")
        let ports = (ipv4.localPort, ipv6.localPort)
        let (listener, recorder) = recordedSocket("listener")
        recorder.onAccept = { [weak recorder] _, child in child.delegate = recorder }  // weak: no cycle through its own closure
        try listener.accept(onDescriptors: [ipv4.detach(), ipv6.detach()])
        defer { listener.disconnect() }
        #expect(Set(listener.listeningAddresses.map(\.port)) == [ports.0, ports.1])
        #expect(listener.isIPv4 && listener.isIPv6)
        try Self.checkServes(recorder, port: ports.0, accepted: 1)
        try Self.checkServes(recorder, port: ports.1, host: "::1", accepted: 2)
    }

    @Test func anAdoptedUnixListenerLeavesItsFileAlone() throws {
        let path = temporaryUnixPath("adopted")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try (try SocketAddress(unixPath: path)).withSockAddr { address, length in
            guard Glibc.bind(fd, address, length) == 0 else { throw TestFailure("bind: \(errno)") }
        }
        defer { unlink(path) }
        let (listener, recorder) = recordedSocket("listener")
        try listener.accept(onDescriptors: [fd])
        #expect(listener.isUnixDomain)
        let (client, clientRecorder) = recordedSocket("client")
        try client.connect(toUnixPath: path, timeout: 5)
        #expect(clientRecorder.waitForConnect())
        #expect(recorder.waitForAccepted(1).count == 1)
        client.disconnect()
        listener.disconnect()
        var status = stat()
        #expect(lstat(path, &status) == 0, "the file the caller made is still there")
    }

    @Test func descriptorsThatCannotListenAreRefusedAndStayTheCallers() throws {
        let (listener, _) = recordedSocket("listener")
        func refused(_ descriptors: [Int32], _ code: SocketError.Code, osError: Int32 = 0) {
            #expect {
                try listener.accept(onDescriptors: descriptors)
            } throws: {
                let error = $0 as? SocketError
                return error?.code == code && (osError == 0 || error?.osError == osError)
            }
            for fd in descriptors where fd >= 0 && fd < 900_000 { #expect(Self.isOpen(fd)) }
        }
        let unbound = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(unbound) }
        refused([unbound], .badParam)
        let datagram = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(datagram) }
        refused([datagram], .badParam)
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        refused([ends[0]], .system, osError: ENOTSOCK)
        refused([-1], .badParam)
        refused([], .badParam)
        refused([987_654], .system, osError: EBADF)
        let good = try RawSocket.listen()
        defer { good.close() }
        refused([good.fd, good.fd], .badParam)
        refused([good.fd, unbound], .badParam)
        #expect(Self.isOpen(good.fd) && fcntl(good.fd, F_GETFL) & O_NONBLOCK == 0, "untouched")
        let server = try RawSocket.listen()
        defer { server.close() }
        let connected = try RawSocket.connect(port: server.localPort)
        defer { connected.close() }
        refused([connected.fd], .badParam)
        // The socket's state: no delegate, or already listening.
        #expect { try Socket().accept(onDescriptors: [good.fd]) } throws: { ($0 as? SocketError)?.code == .badConfig }
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        refused([good.fd], .badConfig)
        #expect(listener.isAccepting)
    }

    /// sd_listen_fds(3)'s rules. The variables name descriptors 3 on; only a test that the
    /// process is theirs reads them, so these use another process id, a malformed one, or a
    /// count of 0 (a real activation runs in the Python suite, in a child process).
    @Test func socketActivationFollowsSdListenFds() throws {
        setenv("LISTEN_PID", "\(getpid() + 1)", 1)
        setenv("LISTEN_FDS", "2", 1)
        #expect(try Socket.socketActivationDescriptors(unsettingEnvironment: false).isEmpty)
        #expect(getenv("LISTEN_FDS") != nil)
        #expect(try Socket.socketActivationDescriptors().isEmpty)
        #expect(getenv("LISTEN_PID") == nil && getenv("LISTEN_FDS") == nil)
        setenv("LISTEN_PID", "\(getpid())", 1)
        setenv("LISTEN_FDS", "0", 1)
        #expect(try Socket.socketActivationDescriptors().isEmpty)
        setenv("LISTEN_PID", "\(getpid())", 1)
        setenv("LISTEN_FDS", "many", 1)
        #expect { try Socket.socketActivationDescriptors() } throws: { ($0 as? SocketError)?.code == .badParam }
        setenv("LISTEN_PID", "me", 1)
        #expect { try Socket.socketActivationDescriptors() } throws: { ($0 as? SocketError)?.code == .badParam }
        #expect(getenv("LISTEN_PID") == nil)
        #expect(try Socket.socketActivationDescriptors().isEmpty) // nothing set
    }
}
