// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// A name whose A and AAAA answers a test gives, each when it likes (the resolver's
/// `familyTestStubs`).
final class StubbedName: @unchecked Sendable {
    enum Answer: Sendable {
        case addresses([SocketAddress])
        case failure
    }

    let host: String
    /// Opened when that family is asked.
    let askedIPv4 = Latch(), askedIPv6 = Latch()
    /// Opened to let that family's answer go (open from the start: it answers at once).
    let releaseIPv4 = Latch(), releaseIPv6 = Latch()

    init(_ tag: String, ipv4: Answer, ipv6: Answer, holdIPv4: Bool = false, holdIPv6: Bool = false) {
        host = "\(tag)-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).eyeballs.socketkit.test"
        if !holdIPv4 { releaseIPv4.open() }
        if !holdIPv6 { releaseIPv6.open() }
        let asked = (askedIPv4, askedIPv6), release = (releaseIPv4, releaseIPv6)
        let host = self.host
        AddressResolver.familyTestStubs.withLock {
            $0[host] = { port, family in
                let answer = family == .ipv4 ? ipv4 : ipv6
                (family == .ipv4 ? asked.0 : asked.1).open()
                _ = (family == .ipv4 ? release.0 : release.1).wait(timeout: 30)
                switch answer {
                case .addresses(let addresses): return .success(addresses.map { $0.withPort(port) })
                case .failure: return .failure(SocketError(.resolution, osError: EAI_NONAME, "\(host): no \(family) address"))
                }
            }
        }
    }

    func remove() {
        releaseIPv4.open()
        releaseIPv6.open()
        AddressResolver.familyTestStubs.withLock { $0[host] = nil }
    }
}

/// Happy Eyeballs v2 (RFC 8305): A and AAAA asked apart, connecting from the first answer,
/// the resolution delay, late answers joining the race (issue 32, item 8).
@Suite("Happy Eyeballs v2")
struct HappyEyeballsTests {
    static let ipv4 = SocketAddress.ipv4Loopback(port: 0)
    static let ipv6 = SocketAddress.ipv6Loopback(port: 0)

    /// Both listeners on one port (the stub's addresses take the connect's port).
    static func listeners() throws -> (RawSocket, RawSocket) {
        let four = try RawSocket.listen(host: "127.0.0.1")
        let six = try RawSocket.listen(host: "::1", port: four.localPort)
        return (four, six)
    }

    static func seconds(since start: UInt64) -> Double { Double(monotonicNanoseconds() - start) / 1e9 }

    @Test func theFirstAnswerConnectsWithoutWaitingForTheOtherFamily() throws {
        let (four, six) = try Self.listeners()
        defer { four.close(); six.close() }
        let name = StubbedName("first", ipv4: .addresses([Self.ipv4]), ipv6: .addresses([Self.ipv6]), holdIPv6: true)
        defer { name.remove() }
        let (client, recorder) = recordedSocket("client")
        try client.connect(toHost: name.host, port: four.localPort, timeout: 10)
        #expect(recorder.waitForConnect())
        #expect(client.connectedHost == "127.0.0.1")
        // The AAAA lookup was asked apart, and its answer is still held back.
        #expect(name.askedIPv6.wait(timeout: 10))
        client.disconnect()
    }

    @Test func theOtherFamilysAnswerWaitsTheResolutionDelayForThePreferredOne() throws {
        let (four, six) = try Self.listeners()
        defer { four.close(); six.close() }
        let name = StubbedName("delay", ipv4: .addresses([Self.ipv4]), ipv6: .addresses([Self.ipv6]), holdIPv6: true)
        defer { name.remove() }
        let (client, recorder) = recordedSocket("client")
        client.isIPv4PreferredOverIPv6 = false
        client.resolutionDelay = 0.3
        #expect(client.resolutionDelay == 0.3)
        let started = monotonicNanoseconds()
        try client.connect(toHost: name.host, port: four.localPort, timeout: 10)
        #expect(recorder.waitForConnect())
        #expect(client.connectedHost == "127.0.0.1")
        #expect(Self.seconds(since: started) >= 0.29, "the IPv4 answer waited for the resolution delay")
        client.disconnect()
    }

    @Test func thePreferredAnswerWithinTheDelayIsTriedFirst() throws {
        let (four, six) = try Self.listeners()
        defer { four.close(); six.close() }
        let name = StubbedName("within", ipv4: .addresses([Self.ipv4]), ipv6: .addresses([Self.ipv6]), holdIPv6: true)
        defer { name.remove() }
        let (client, recorder) = recordedSocket("client")
        client.isIPv4PreferredOverIPv6 = false
        client.resolutionDelay = 20
        let started = monotonicNanoseconds()
        try client.connect(toHost: name.host, port: four.localPort, timeout: 30)
        #expect(name.askedIPv4.wait() && name.askedIPv6.wait())
        name.releaseIPv6.open()
        #expect(recorder.waitForConnect())
        #expect(client.connectedHost == "::1")
        #expect(Self.seconds(since: started) < 15, "the preferred answer ended the wait")
        client.disconnect()
    }

    @Test func oneFamilyFailingLeavesTheOther() throws {
        let (four, six) = try Self.listeners()
        defer { four.close(); six.close() }
        for preferIPv4 in [true, false] {
            let name = StubbedName("half", ipv4: .failure, ipv6: .addresses([Self.ipv6]))
            defer { name.remove() }
            let (client, recorder) = recordedSocket("client")
            client.isIPv4PreferredOverIPv6 = preferIPv4
            try client.connect(toHost: name.host, port: four.localPort, timeout: 10)
            #expect(recorder.waitForConnect())
            #expect(client.connectedHost == "::1")
            client.disconnect()
        }
    }

    @Test func everyFamilyFailingIsOneResolutionError() throws {
        let name = StubbedName("none", ipv4: .failure, ipv6: .failure)
        defer { name.remove() }
        let (client, recorder) = recordedSocket("client")
        try client.connect(toHost: name.host, port: 9, timeout: 10)
        #expect(recorder.waitForDisconnect()??.code == .resolution)
        #expect(recorder.events.filter(\.isDisconnect).count == 1)
        // One family only: one lookup.
        let single = StubbedName("single", ipv4: .addresses([Self.ipv4]), ipv6: .failure)
        defer { single.remove() }
        let (four, six) = try Self.listeners()
        defer { four.close(); six.close() }
        let (only, onlyRecorder) = recordedSocket("only")
        only.isIPv6Enabled = false
        try only.connect(toHost: single.host, port: four.localPort, timeout: 10)
        #expect(onlyRecorder.waitForConnect())
        #expect(!single.askedIPv6.wait(timeout: 0))
        only.disconnect()
    }

    /// The A answer's address refuses at once; the AAAA answer, held until then, joins the
    /// race instead of the session ending with the refusal.
    @Test func anAnswerAfterTheOtherFamilysAttemptsFailedStillConnects() throws {
        let refusing = try RawSocket.boundNotListening()
        defer { refusing.close() }
        let six = try RawSocket.listen(host: "::1", port: refusing.localPort)
        defer { six.close() }
        let name = StubbedName("late", ipv4: .addresses([Self.ipv4]), ipv6: .addresses([Self.ipv6]), holdIPv6: true)
        defer { name.remove() }
        let (client, recorder) = recordedSocket("client")
        try client.connect(toHost: name.host, port: refusing.localPort, timeout: 10)
        // Wait (on the loop, bounded) until the IPv4 attempt has failed: nothing left to try.
        let deadline = monotonicNanoseconds() + 10_000_000_000
        var exhausted = false
        while !exhausted && monotonicNanoseconds() < deadline {
            let checked = Latch()
            let core = client.core
            let state = LockedValue(false)
            client.eventLoop.execute {
                state.withLock { $0 = core.phase == .connecting && core.connectAttempts.isEmpty }
                checked.open()
            }
            checked.wait()
            exhausted = state.withLock { $0 }
        }
        #expect(exhausted, "the IPv4 attempt did not fail")
        #expect(!recorder.events.contains { $0.isDisconnect })
        name.releaseIPv6.open()
        #expect(recorder.waitForConnect())
        #expect(client.connectedHost == "::1")
        client.disconnect()
    }

    @Test func theResolutionDelayTakesNoNegativeOrNaN() {
        let socket = Socket()
        #expect(socket.resolutionDelay == 0.05)
        socket.resolutionDelay = -1
        #expect(socket.resolutionDelay == 0)
        socket.resolutionDelay = .nan
        #expect(socket.resolutionDelay == 0)
    }
}
