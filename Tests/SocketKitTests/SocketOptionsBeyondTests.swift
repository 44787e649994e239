// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Synchronization
import Testing
@testable import SocketKit

/// Reads an integer option of one of the socket's descriptors on its loop (`perform`).
func descriptorOption(_ socket: Socket, _ level: Int32, _ name: Int32,
                      of which: @escaping @Sendable (SocketDescriptors) -> Int32 = { $0.primary }) -> Int32? {
    let result = LockedValue<Int32?>(nil)
    let done = Latch()
    socket.perform { descriptors in
        result.withLock { $0 = SystemCalls.getOption(which(descriptors), level, name) }
        done.open()
    }
    done.wait()
    return result.withLock { $0 }
}

/// TCP_USER_TIMEOUT, TCP Fast Open and options set before bind, connect and listen
/// (issue 32, item 5).
@Suite("Options beyond CocoaAsyncSocket")
struct SocketOptionsBeyondTests {
    let tcp = Int32(IPPROTO_TCP)

    @Test func userTimeoutReachesConnectionsAndAcceptedOnesAndChangesApplyAtOnce() throws {
        let pair = try Pair(configureClient: { try $0.setUserTimeout(2.25) },
                            configureListener: { try $0.setUserTimeout(1.5) })
        defer { pair.close() }
        #expect(pair.client.userTimeout == 2.25)
        #expect(descriptorOption(pair.client, tcp, TCP_USER_TIMEOUT) == 2250)
        #expect(pair.server.userTimeout == 1.5)
        #expect(descriptorOption(pair.server, tcp, TCP_USER_TIMEOUT) == 1500)
        try pair.client.setUserTimeout(0.0001) // rounded up: 0 would mean the kernel's
        #expect(descriptorOption(pair.client, tcp, TCP_USER_TIMEOUT) == 1)
        try pair.client.setUserTimeout(0)
        #expect(descriptorOption(pair.client, tcp, TCP_USER_TIMEOUT) == 0)
        #expect(Socket().userTimeout == 0)
    }

    @Test func invalidUserTimeoutsAreRefused() {
        let socket = Socket()
        for bad in [-1, Double.nan, .infinity, 3_000_000] {
            #expect { try socket.setUserTimeout(bad) } throws: { ($0 as? SocketError)?.code == .badParam }
        }
        #expect(socket.userTimeout == 0)
    }

    @Test func fastOpenReachesTheListenerAndTheConnectAndBothWaysWork() throws {
        let pair = try Pair(configureClient: { $0.fastOpen = true }, configureListener: { $0.fastOpen = true })
        defer { pair.close() }
        #expect(pair.listener.fastOpen && pair.client.fastOpen && pair.server.fastOpen)
        #expect(descriptorOption(pair.listener, tcp, TCP_FASTOPEN, of: { $0.ipv4 }) == ListenerFactory.fastOpenQueueLength)
        #expect(descriptorOption(pair.client, tcp, TCP_FASTOPEN_CONNECT) == 1)
        try pair.client.write(bytes("ping"))
        try pair.server.read(toLength: 4, tag: 1)
        #expect(pair.serverRecorder.waitForBytes(4) == bytes("ping"))
        try pair.server.write(bytes("pong"))
        try pair.client.read(toLength: 4, tag: 2)
        #expect(pair.clientRecorder.waitForBytes(4) == bytes("pong"))
        let (plain, _) = recordedSocket("plain")
        try plain.accept(onInterface: "127.0.0.1", port: 0)
        #expect(descriptorOption(plain, tcp, TCP_FASTOPEN, of: { $0.ipv4 }) == 0)
        plain.disconnect()
    }

    /// Where the kernel allows Fast Open both ways (net.ipv4.tcp_fastopen & 3 == 3), the
    /// second connection's first write rides in its SYN, and a server that speaks first
    /// still gets its connection (the empty send that sends the SYN alone).
    @Test func withACookieTheFirstWriteRidesInTheSYN() throws {
        guard Self.kernelFastOpenBits() & 3 == 3 else {
            print("note: net.ipv4.tcp_fastopen is \(Self.kernelFastOpenBits()), not 3: SYN data not checked")
            return
        }
        let (listener, listenerRecorder) = recordedSocket("listener")
        listener.fastOpen = true
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        for round in 0..<3 {
            let (client, recorder) = recordedSocket("client")
            client.fastOpen = true
            // Connect and write on the client's loop, so the write is queued before the
            // loop hears that the socket is writable (from another thread that is a race).
            let port = listener.localPort
            let queued = Latch()
            client.eventLoop.execute {
                try? client.connect(toHost: "127.0.0.1", port: port, timeout: 5)
                if round < 2 { try? client.write(bytes("hello")) }
                queued.open()
            }
            #expect(queued.wait())
            #expect(recorder.waitForConnect())
            let server = try #require(listenerRecorder.waitForAccepted(round + 1).last)
            if round < 2 {
                try server.read(toLength: 5, tag: 1)
                try server.write(bytes("x"))
                try client.read(toLength: 1, tag: 1)
                #expect(recorder.waitForBytes(1) == bytes("x"))
                let synData = (Self.tcpInfoOptions(client) ?? 0) & Int32(TCPI_OPT_SYN_DATA) != 0
                // The first connection fetches the cookie (unless the kernel kept one from
                // before); the second uses it.
                if round == 1 { #expect(synData, "the second connection's SYN carried no data") }
            } else {
                // Nothing written: the server speaks first, and still gets its connection.
                try server.write(bytes("banner"))
                try client.read(toLength: 6, tag: 1)
                #expect(recorder.waitForBytes(6) == bytes("banner"))
            }
            client.disconnect()
            server.disconnect()
        }
    }

    @Test func optionsAreSetBeforeConnectBindAndListen() throws {
        // TCP_MAXSEG only shapes the SYN when set before connect (and the SYN-ACK when set
        // on the listener before listen); on loopback the MSS is otherwise near 64 KiB.
        let mss = { (fd: Int32) in SystemCalls.getOption(fd, Int32(IPPROTO_TCP), TCP_MAXSEG) ?? 0 }
        let (listener, listenerRecorder) = recordedSocket("listener")
        try listener.setSocketOption(SocketOption(level: tcp, name: TCP_MAXSEG, value: 800))
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let raw = try RawSocket.connect(port: listener.localPort)
        defer { raw.close() }
        #expect(mss(raw.fd) > 0 && mss(raw.fd) <= 800, "the listener's SYN-ACK announced \(mss(raw.fd))")

        let plain = try RawSocket.listen()
        defer { plain.close() }
        let (client, recorder) = recordedSocket("client")
        try client.setSocketOption(SocketOption(level: tcp, name: TCP_MAXSEG, value: 1000))
        try client.connect(toHost: "127.0.0.1", port: plain.localPort, timeout: 5)
        #expect(recorder.waitForConnect())
        let accepted = try plain.accept()
        defer { accepted.close(); client.disconnect() }
        let clientMSS = descriptorOption(client, tcp, TCP_MAXSEG) ?? 0
        #expect(clientMSS > 0 && clientMSS <= 1000, "the client's MSS is \(clientMSS)")
        #expect(mss(accepted.fd) <= 1000)
        _ = listenerRecorder
    }

    @Test func anOptionSetBeforeBindLetsTwoListenersShareAPort() throws {
        let reusePort = SocketOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1)
        let (first, _) = recordedSocket("first")
        try first.setSocketOption(reusePort)
        try first.accept(onInterface: "127.0.0.1", port: 0)
        defer { first.disconnect() }
        let (second, _) = recordedSocket("second")
        #expect { try second.accept(onInterface: "127.0.0.1", port: first.localPort) } throws: {
            ($0 as? SocketError)?.osError == EADDRINUSE
        }
        try second.setSocketOption(reusePort)
        try second.accept(onInterface: "127.0.0.1", port: first.localPort)
        second.disconnect()
    }

    @Test func anOptionTheKernelRefusesFailsTheListenAtOnceAndTheConnectThroughTheDelegate() throws {
        let unknown = SocketOption(level: tcp, name: 9999, value: 1)
        let (listener, _) = recordedSocket("listener")
        try listener.setSocketOption(unknown)
        #expect { try listener.accept(onInterface: "127.0.0.1", port: 0) } throws: {
            ($0 as? SocketError)?.code == .system && ($0 as? SocketError)?.osError == ENOPROTOOPT
        }
        #expect(listener.isDisconnected)
        let peer = try RawSocket.listen()
        defer { peer.close() }
        let (client, recorder) = recordedSocket("client")
        try client.setSocketOption(unknown)
        try client.connect(toHost: "127.0.0.1", port: peer.localPort, timeout: 5)
        let error = try #require(recorder.waitForDisconnect() ?? nil)
        #expect(error.code == .system && error.osError == ENOPROTOOPT, "\(error)")
        client.removeAllSocketOptions()
        #expect(client.socketOptions.isEmpty)
        try client.connect(toHost: "127.0.0.1", port: peer.localPort, timeout: 5)
        #expect(recorder.waitForConnect())
        client.disconnect()
    }

    @Test func optionsAreCheckedReplacedAndBounded() throws {
        let socket = Socket()
        #expect { try SocketOption(level: 1, name: 2, value: []) } throws: { ($0 as? SocketError)?.code == .badParam }
        #expect { try SocketOption(level: 1, name: 2, value: [UInt8](repeating: 0, count: 1025)) } throws: {
            ($0 as? SocketError)?.code == .badParam
        }
        try socket.setSocketOption(SocketOption(level: SOL_SOCKET, name: SO_MARK, value: 1))
        try socket.setSocketOption(SocketOption(level: SOL_SOCKET, name: SO_MARK, value: 2))
        #expect(socket.socketOptions == [SocketOption(level: SOL_SOCKET, name: SO_MARK, value: 2)])
        for name in 0..<Int32(Socket.maximumSocketOptions - 1) {
            try socket.setSocketOption(SocketOption(level: 1000, name: name, value: 0))
        }
        #expect { try socket.setSocketOption(SocketOption(level: 1001, name: 0, value: 0)) } throws: {
            ($0 as? SocketError)?.code == .badParam
        }
        try socket.setSocketOption(SocketOption(level: 1000, name: 0, value: 5)) // a replacement fits
        #expect(socket.socketOptions.count == Socket.maximumSocketOptions)
    }

    static func kernelFastOpenBits() -> Int {
        guard let file = fopen("/proc/sys/net/ipv4/tcp_fastopen", "r") else { return 0 }
        defer { fclose(file) }
        var value: Int32 = 0
        return fscanf_int(file, &value) ? Int(value) : 0
    }

    /// `tcpi_options` of the connection's TCP_INFO.
    static func tcpInfoOptions(_ socket: Socket) -> Int32? {
        let result = LockedValue<Int32?>(nil)
        let done = Latch()
        socket.perform { descriptors in
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            if getsockopt(descriptors.primary, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 {
                result.withLock { $0 = Int32(info.tcpi_options) }
            }
            done.open()
        }
        done.wait()
        return result.withLock { $0 }
    }
}

/// fscanf's "%d", which Swift cannot call (variadic).
private func fscanf_int(_ file: UnsafeMutablePointer<FILE>, _ value: inout Int32) -> Bool {
    var buffer = [CChar](repeating: 0, count: 32)
    guard fgets(&buffer, 32, file) != nil else { return false }
    value = atoi(buffer)
    return true
}
