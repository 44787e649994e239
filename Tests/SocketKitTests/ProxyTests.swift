// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A proxy server nobody here wrote (Debian's microsocks or tinyproxy), on a loopback port
/// found free, stopped by `stop()`. Ready once it accepts a connection (bounded wait).
final class ExternalProxy {
    let process: ResourceExhaustionTests.ChildProcess
    let port: UInt16
    private let configuration: String?

    private init(process: ResourceExhaustionTests.ChildProcess, port: UInt16, configuration: String?) {
        self.process = process
        self.port = port
        self.configuration = configuration
    }

    static func isInstalled(_ program: String) -> Bool {
        access("/usr/bin/\(program)", X_OK) == 0
    }

    static func freePort() throws -> UInt16 {
        let probe = try RawSocket.listen()
        defer { probe.close() }
        return probe.localPort
    }

    static func microsocks(username: String? = nil, password: String? = nil) throws -> ExternalProxy {
        let port = try freePort()
        var command = "exec /usr/bin/microsocks -i 127.0.0.1 -p \(port)"
        if let username, let password { command += " -u \(username) -P \(password)" }
        let proxy = ExternalProxy(process: try .init(shellCommand: command + " 2>&1"), port: port, configuration: nil)
        try proxy.waitUntilListening()
        return proxy
    }

    /// tinyproxy, unprivileged, from a generated configuration: CONNECT to any port.
    static func tinyproxy(basicAuth: (String, String)? = nil) throws -> ExternalProxy {
        let port = try freePort()
        let path = "/tmp/socketkit-tinyproxy-\(getpid())-\(port).conf"
        var text = "Port \(port)\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\nLogLevel Error\n"
        if let (user, password) = basicAuth { text += "BasicAuth \(user) \(password)\n" }
        guard let file = fopen(path, "w") else { throw TestFailure("cannot write \(path)") }
        fputs(text, file)
        fclose(file)
        let proxy = ExternalProxy(process: try .init(shellCommand: "exec /usr/bin/tinyproxy -d -c \(path) 2>&1"),
                                  port: port, configuration: path)
        try proxy.waitUntilListening()
        return proxy
    }

    /// Polls for the listener: connect attempts, each waiting on the kernel, for at most 10 s.
    private func waitUntilListening() throws {
        let limit = deadline(afterSeconds: 10)
        while monotonicNanoseconds() < limit {
            if let probe = try? RawSocket.connect(port: port) {
                probe.close()
                return
            }
            var idle = pollfd(fd: -1, events: 0, revents: 0)
            _ = poll(&idle, 1, 20)
        }
        stop()
        throw TestFailure("the proxy did not listen on port \(port)")
    }

    func stop() {
        process.stop()
        if let configuration { unlink(configuration) }
    }
}

@Suite("Proxies (SOCKS5, HTTP CONNECT)")
struct ProxyTests {
    static let hasMicrosocks = ExternalProxy.isInstalled("microsocks")
    static let hasTinyproxy = ExternalProxy.isInstalled("tinyproxy")

    /// Connects `socket` to `target` through `proxy`, queues a write and a read before the
    /// connection is up, and checks both cross with the target (a raw listener).
    func exchange(through proxy: ProxySettings, targetHost: String, targetListener: RawSocket) throws {
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(proxy)
        #expect(socket.proxy == proxy)
        try socket.connect(toHost: targetHost, port: targetListener.localPort, timeout: 20)
        try socket.write(bytes("ping"), tag: 1)
        try socket.read(toLength: 4, tag: 2)
        let target = try targetListener.accept()
        defer { target.close() }
        #expect(try target.receive(exactly: 4) == bytes("ping"))
        try target.send("pong")
        #expect(recorder.waitForBytes(4) == bytes("pong"))
        #expect(recorder.events.first == .connected(host: targetHost, port: targetListener.localPort))
        #expect(socket.connectedHost == targetHost)
        #expect(socket.connectedPort == targetListener.localPort)
        #expect(socket.connectedAddress?.port == proxy.port) // the TCP peer is the proxy
        #expect(socket.localPort != 0)
        socket.disconnect()
    }

    @Test(.enabled(if: hasMicrosocks, "microsocks is not installed (make test-tools)"))
    func socks5ThroughMicrosocksSendsTheNameUnresolved() throws {
        let proxy = try ExternalProxy.microsocks()
        defer { proxy.stop() }
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let settings = try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.port)
        try exchange(through: settings, targetHost: "localhost", targetListener: listener)
        try exchange(through: settings, targetHost: "127.0.0.1", targetListener: listener)
    }

    @Test(.enabled(if: hasMicrosocks, "microsocks is not installed (make test-tools)"))
    func socks5UsernameAndPasswordThroughMicrosocks() throws {
        let proxy = try ExternalProxy.microsocks(username: "alice", password: "s3cret")
        defer { proxy.stop() }
        let listener = try RawSocket.listen()
        defer { listener.close() }
        try exchange(through: try ProxySettings(kind: .socks5, host: "localhost", port: proxy.port,
                                                username: "alice", password: "s3cret"),
                     targetHost: "localhost", targetListener: listener)
        for settings in [try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.port, username: "alice", password: "wrong"),
                         try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.port)] {
            let (socket, recorder) = recordedSocket()
            try socket.setProxy(settings)
            try socket.connect(toHost: "localhost", port: listener.localPort, timeout: 20)
            let error = recorder.waitForDisconnect(timeout: 20)
            #expect(error??.code == .proxyAuthentication, "\(String(describing: error))")
            #expect(!recorder.events.contains { if case .connected = $0 { return true }; return false })
        }
    }

    @Test(.enabled(if: hasTinyproxy, "tinyproxy is not installed (make test-tools)"))
    func httpConnectThroughTinyproxy() throws {
        let proxy = try ExternalProxy.tinyproxy()
        defer { proxy.stop() }
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let settings = try ProxySettings(kind: .httpConnect, host: "127.0.0.1", port: proxy.port)
        try exchange(through: settings, targetHost: "localhost", targetListener: listener)
        try exchange(through: settings, targetHost: "127.0.0.1", targetListener: listener)
        // A port nobody listens on: tinyproxy answers with an error status.
        let closed = try RawSocket.boundNotListening()
        defer { closed.close() }
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(settings)
        try socket.connect(toHost: "127.0.0.1", port: closed.localPort, timeout: 20)
        let error = recorder.waitForDisconnect(timeout: 20)
        #expect(error??.code == .proxy, "\(String(describing: error))")
        #expect((500...599).contains(error??.osError ?? 0), "\(String(describing: error))")
    }

    @Test(.enabled(if: hasTinyproxy, "tinyproxy is not installed (make test-tools)"))
    func httpConnectBasicAuthenticationThroughTinyproxy() throws {
        let proxy = try ExternalProxy.tinyproxy(basicAuth: ("bob", "pa55"))
        defer { proxy.stop() }
        let listener = try RawSocket.listen()
        defer { listener.close() }
        try exchange(through: try ProxySettings(kind: .httpConnect, host: "127.0.0.1", port: proxy.port,
                                                username: "bob", password: "pa55"),
                     targetHost: "127.0.0.1", targetListener: listener)
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(try ProxySettings(kind: .httpConnect, host: "127.0.0.1", port: proxy.port,
                                              username: "bob", password: "nope"))
        try socket.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 20)
        let error = recorder.waitForDisconnect(timeout: 20)
        #expect(error??.code == .proxyAuthentication, "\(String(describing: error))")
        // tinyproxy answers CONNECT with 401 where RFC 9110 says 407: both mean "credentials".
        #expect(error??.osError == 401 || error??.osError == 407)
    }

    /// TLS after the proxy: `startTLS` queued before the proxy answered, the client verifies
    /// the target's name ("localhost"), not the proxy's address.
    @Test(.enabled(if: hasMicrosocks, "microsocks is not installed (make test-tools)"))
    func tlsThroughMicrosocksVerifiesTheTarget() throws {
        let proxy = try ExternalProxy.microsocks()
        defer { proxy.stop() }
        try tlsThrough(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.port))
    }

    @Test(.enabled(if: hasTinyproxy, "tinyproxy is not installed (make test-tools)"))
    func tlsThroughTinyproxyVerifiesTheTarget() throws {
        let proxy = try ExternalProxy.tinyproxy()
        defer { proxy.stop() }
        try tlsThrough(try ProxySettings(kind: .httpConnect, host: "127.0.0.1", port: proxy.port))
    }

    private func tlsThrough(_ settings: ProxySettings) throws {
        let (listener, listenerRecorder) = recordedSocket("listener")
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let (client, clientRecorder) = recordedSocket("client")
        try client.setProxy(settings)
        try client.connect(toHost: "localhost", port: listener.localPort, timeout: 20)
        try client.startTLS(TestCertificates.client())
        try client.write(bytes("secret"), tag: 1)
        let accepted = listenerRecorder.waitForAccepted(1)
        try #require(accepted.count == 1)
        let server = accepted[0]
        try server.startTLS(TestCertificates.server())
        try server.read(toLength: 6, tag: 3)
        #expect(clientRecorder.waitForSecure(timeout: 20))
        #expect(client.tlsInfo?.peerCertificates.isEmpty == false)
        #expect(listenerRecorder.waitForBytes(6, timeout: 20) == bytes("secret"))
        client.disconnect()
        server.disconnect()
    }

    // MARK: Scripted proxies (the error cases)

    /// A socket connecting through the raw listener `proxy` to example.test:443; returns the
    /// proxy's end of the connection.
    func connectThroughScripted(_ kind: ProxySettings.Kind, proxy: RawSocket, username: String? = nil,
                                timeout: Double = 20) throws -> (Socket, Recorder, RawSocket) {
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(try ProxySettings(kind: kind, host: "127.0.0.1", port: proxy.localPort,
                                              username: username, password: username.map { _ in "pw" }))
        try socket.connect(toHost: "example.test", port: 443, timeout: timeout)
        return (socket, recorder, try proxy.accept())
    }

    /// Reads a SOCKS5 no-auth greeting and the CONNECT for example.test:443.
    func expectSocksRequest(_ peer: RawSocket) throws {
        #expect(try peer.receive(exactly: 3) == [5, 1, 0])
        try peer.send([5, 0])
        let name = bytes("example.test")
        #expect(try peer.receive(exactly: 5 + name.count + 2) == [5, 1, 0, 3, UInt8(name.count)] + name + [1, 187])
    }

    @Test func eachSocksReplyCodeIsAProxyErrorNamingIt() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        let texts = ["general SOCKS server failure", "not allowed by ruleset", "network unreachable", "host unreachable",
                     "connection refused", "TTL expired", "command not supported", "address type not supported"]
        for (index, text) in texts.enumerated() {
            let reply = UInt8(index + 1)
            let (socket, recorder, peer) = try connectThroughScripted(.socks5, proxy: proxy)
            try expectSocksRequest(peer)
            try peer.send([5, reply, 0, 1, 0, 0, 0, 0, 0, 0])
            let error = try #require(recorder.waitForDisconnect(timeout: 20) ?? nil)
            #expect(error.code == .proxy)
            #expect(error.osError == Int32(reply))
            #expect(error.message.contains(text), "\(error)")
            #expect(error.message.contains("example.test:443"), "\(error)")
            #expect(socket.isDisconnected)
            peer.close()
        }
    }

    @Test func socksAuthenticationFailuresAreProxyAuthenticationErrors() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        // RFC 1929 status 1.
        var (socket, recorder, peer) = try connectThroughScripted(.socks5, proxy: proxy, username: "user")
        #expect(try peer.receive(exactly: 4) == [5, 2, 0, 2])
        try peer.send([5, 2])
        #expect(try peer.receive(exactly: 2 + 4 + 1 + 2) == [1, 4] + bytes("user") + [2] + bytes("pw"))
        try peer.send([1, 1])
        #expect((recorder.waitForDisconnect(timeout: 20) ?? nil)?.code == .proxyAuthentication)
        peer.close()
        // No acceptable method (0xFF).
        (socket, recorder, peer) = try connectThroughScripted(.socks5, proxy: proxy)
        #expect(try peer.receive(exactly: 3) == [5, 1, 0])
        try peer.send([5, 0xFF])
        let error = recorder.waitForDisconnect(timeout: 20) ?? nil
        #expect(error?.code == .proxyAuthentication)
        #expect(error?.message.contains("requires authentication") == true, "\(String(describing: error))")
        peer.close()
        withExtendedLifetime(socket) {}
    }

    @Test func httpStatusesOtherThan2xxFail() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        for (status, code) in [(403, SocketError.Code.proxy), (407, .proxyAuthentication), (401, .proxyAuthentication), (502, .proxy)] {
            let (socket, recorder, peer) = try connectThroughScripted(.httpConnect, proxy: proxy)
            let request = "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n"
            #expect(try peer.receive(exactly: request.utf8.count) == bytes(request))
            try peer.send("HTTP/1.1 \(status) Nope\r\nContent-Length: 0\r\n\r\n")
            let error = try #require(recorder.waitForDisconnect(timeout: 20) ?? nil)
            #expect(error.code == code)
            #expect(error.osError == Int32(status))
            #expect(error.message.contains("\(status) Nope"), "\(error)")
            peer.close()
            withExtendedLifetime(socket) {}
        }
    }

    @Test func httpBasicCredentialsAreSent() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        let (socket, recorder, peer) = try connectThroughScripted(.httpConnect, proxy: proxy, username: "user")
        // base64("user:pw") = dXNlcjpwdw==
        let request = "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\nProxy-Authorization: Basic dXNlcjpwdw==\r\n\r\n"
        #expect(try peer.receive(exactly: request.utf8.count) == bytes(request))
        try peer.send("HTTP/1.0 200 Connection established\r\n\r\n")
        #expect(recorder.waitForConnect(timeout: 20))
        #expect(recorder.events.first == .connected(host: "example.test", port: 443))
        peer.close()
        socket.disconnect()
    }

    @Test func aProxyClosingMidHandshakeIsAProxyError() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        for kind in [ProxySettings.Kind.socks5, .httpConnect] {
            let (socket, recorder, peer) = try connectThroughScripted(kind, proxy: proxy)
            _ = try peer.receive(exactly: 3)
            try peer.send(kind == .socks5 ? [5] : bytes("HTTP/1.1 200"))
            peer.close()
            let error = try #require(recorder.waitForDisconnect(timeout: 20) ?? nil)
            #expect(error.code == .proxy)
            #expect(error.message.contains("closed the connection during its handshake"), "\(error)")
            withExtendedLifetime(socket) {}
        }
    }

    @Test func aSilentProxyEndsWithTheConnectTimeout() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        let (socket, recorder, peer) = try connectThroughScripted(.socks5, proxy: proxy, timeout: 0.5)
        defer { peer.close() }
        let error = try #require(recorder.waitForDisconnect(timeout: 20) ?? nil)
        #expect(error.code == .connectTimeout)
        #expect(error.message.contains("SOCKS5 proxy"), "\(error)")
        withExtendedLifetime(socket) {}
    }

    @Test func anUnreachableProxyIsASystemError() throws {
        let closed = try RawSocket.boundNotListening()
        defer { closed.close() }
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: closed.localPort))
        try socket.connect(toHost: "example.test", port: 443, timeout: 20)
        let error = try #require(recorder.waitForDisconnect(timeout: 20) ?? nil)
        #expect(error.code == .system)
        #expect(error.osError == ECONNREFUSED)
    }

    /// A server that speaks first: what the proxy relays right behind its answer (in the
    /// same segment) is the first thing read, before what follows.
    @Test func bytesRightAfterTheProxysAnswerAreNotLost() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        for kind in [ProxySettings.Kind.socks5, .httpConnect] {
            let (socket, recorder, peer) = try connectThroughScripted(kind, proxy: proxy)
            if kind == .socks5 {
                try expectSocksRequest(peer)
                try peer.send([5, 0, 0, 3, 4] + bytes("name") + [0, 80] + bytes("220 hello\r\n"))
            } else {
                _ = try peer.receive(exactly: "CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n".utf8.count)
                try peer.send("HTTP/1.1 200 OK\r\nVia: test\r\n\r\n220 hello\r\n")
            }
            #expect(recorder.waitForConnect(timeout: 20))
            try socket.read(toData: bytes("\r\n"), tag: 1)
            try peer.send("more")
            try socket.read(toLength: 4, tag: 2)
            #expect(recorder.waitForBytes(15) == bytes("220 hello\r\nmore"))
            peer.close()
            socket.disconnect()
        }
    }

    /// Literals go as addresses (ATYP 1 and 4), and through HTTP in brackets.
    @Test func literalTargetsGoAsAddresses() throws {
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        let (socket, recorder) = recordedSocket()
        try socket.setProxy(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.localPort))
        try socket.connect(to: try SocketAddress(ipAddress: "::1", port: 8080), timeout: 20)
        let peer = try proxy.accept()
        #expect(try peer.receive(exactly: 3) == [5, 1, 0])
        try peer.send([5, 0])
        #expect(try peer.receive(exactly: 4 + 16 + 2) == [5, 1, 0, 4] + [UInt8](repeating: 0, count: 15) + [1, 0x1F, 0x90])
        try peer.send([5, 0, 0, 1, 127, 0, 0, 1, 0, 1])
        #expect(recorder.waitForConnect(timeout: 20))
        #expect(recorder.events.first == .connected(host: "::1", port: 8080))
        peer.close()
        socket.disconnect()

        let (http, httpRecorder) = recordedSocket()
        try http.setProxy(try ProxySettings(kind: .httpConnect, host: "127.0.0.1", port: proxy.localPort))
        try http.connect(toHost: "::1", port: 8080, timeout: 20)
        let httpPeer = try proxy.accept()
        let request = "CONNECT [::1]:8080 HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"
        #expect(try httpPeer.receive(exactly: request.utf8.count) == bytes(request))
        try httpPeer.send("HTTP/1.1 200 OK\r\n\r\n")
        #expect(httpRecorder.waitForConnect(timeout: 20))
        httpPeer.close()
        http.disconnect()
    }

    /// Our own SOCKS5 proxy, which connects to the TLS server whatever name it is asked for:
    /// the client asks for "wrong.example", which the server's certificate names; the proxy's
    /// own address (127.0.0.1) is not in it, so the handshake succeeds only if TLS checks
    /// the target's name.
    @Test func tlsChecksTheTargetsNameNotTheProxys() throws {
        let (listener, listenerRecorder) = recordedSocket("listener")
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let proxy = try RawSocket.listen()
        defer { proxy.close() }
        let (client, clientRecorder) = recordedSocket("client")
        try client.setProxy(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: proxy.localPort))
        try client.connect(toHost: "wrong.example", port: 443, timeout: 20)
        try client.startTLS(TestCertificates.client())
        let peer = try proxy.accept()
        defer { peer.close() }
        #expect(try peer.receive(exactly: 3) == [5, 1, 0])
        try peer.send([5, 0])
        _ = try peer.receive(exactly: 5 + "wrong.example".utf8.count + 2)
        let upstream = try RawSocket.connect(port: listener.localPort)
        defer { upstream.close() }
        try peer.send([5, 0, 0, 1, 127, 0, 0, 1, 0, 1])
        let accepted = listenerRecorder.waitForAccepted(1)
        try #require(accepted.count == 1)
        try accepted[0].startTLS(TestCertificates.server("wrong-host"))
        // Relay both ways on this thread until the client is secure.
        var fds = [pollfd(fd: peer.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream.fd, events: Int16(POLLIN), revents: 0)]
        let limit = deadline(afterSeconds: 20)
        while !clientRecorder.events.contains(.secured) && monotonicNanoseconds() < limit {
            guard poll(&fds, 2, 100) >= 0 else { break }
            for (index, entry) in fds.enumerated() where entry.revents & Int16(POLLIN) != 0 {
                var chunk = [UInt8](repeating: 0, count: 16384)
                let count = read(entry.fd, &chunk, chunk.count)
                guard count > 0 else { continue }
                try (index == 0 ? upstream : peer).send(Array(chunk[..<count]))
            }
        }
        #expect(clientRecorder.events.contains(.secured), "\(clientRecorder.events)")
        client.disconnect()
    }

    @Test func settingsAreChecked() throws {
        #expect(throws: SocketError.self) { try ProxySettings(kind: .socks5, host: "", port: 1080) }
        #expect(throws: SocketError.self) { try ProxySettings(kind: .socks5, host: "proxy", port: 0) }
        #expect(throws: SocketError.self) { try ProxySettings(kind: .socks5, host: "proxy", port: 1080, username: "u") }
        #expect(throws: SocketError.self) {
            try ProxySettings(kind: .socks5, host: "proxy", port: 1080, username: String(repeating: "u", count: 256), password: "p")
        }
        #expect(throws: SocketError.self) { try ProxySettings(kind: .httpConnect, host: "proxy", port: 80, username: "a:b", password: "p") }
        #expect(throws: SocketError.self) { try ProxySettings(kind: .httpConnect, host: "proxy", port: 80, username: "a", password: "p\r\nX: y") }
        // A SOCKS5 target name over 255 bytes cannot be asked for.
        let (socket, _) = recordedSocket()
        try socket.setProxy(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: 1080))
        #expect(throws: SocketError(.badParam, "a SOCKS5 proxy takes host names of at most 255 bytes")) {
            try socket.connect(toHost: String(repeating: "a", count: 256), port: 80)
        }
        #expect(ProxyHandshake.base64(bytes("Aladdin:open sesame")) == "QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        #expect(ProxyHandshake.base64(bytes("ab")) == "YWI=")
    }

    @Test func theProxyIsSetOnlyBeforeConnecting() throws {
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let (socket, recorder) = recordedSocket()
        try socket.connect(toHost: "127.0.0.1", port: listener.localPort)
        #expect(recorder.waitForConnect())
        #expect(throws: SocketError.self) { try socket.setProxy(try ProxySettings(kind: .socks5, host: "127.0.0.1", port: 1080)) }
        socket.disconnect()
        try socket.setProxy(nil)
        #expect(socket.proxy == nil)
    }
}
