// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// A listener's disconnect returns with its descriptors closed and its socket file removed
/// (issue 27.5), and removes only the file it made.
@Suite("Closing listeners")
struct ListenerCloseTests {
    /// Connects a plain client to the Unix-domain socket at `path`: nil when it fails.
    static func connectUnix(_ path: String) -> Int32? {
        guard let address = try? SocketAddress(unixPath: path) else { return nil }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        guard address.withSockAddr({ Glibc.connect(fd, $0, $1) }) == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Listening again on the port right after `disconnect()` never finds it in use, for a
    /// new socket and for the same one, on both families.
    @Test func aPortIsFreeTheMomentDisconnectReturns() throws {
        var port: UInt16 = 0
        let recorder = Recorder()
        let again = Socket(delegate: recorder)
        for round in 0..<200 {
            let listener = Socket(delegate: recorder)
            try listener.accept(onInterface: "localhost", port: port)
            port = listener.localPort
            listener.disconnect()
            do {
                try again.accept(onInterface: "localhost", port: port)
            } catch {
                Issue.record("round \(round): listening again on \(port) after disconnect: \(error)")
                return
            }
            again.disconnect()
        }
    }

    /// The same for a Unix-domain path, and the new listener stays reachable: the old one's
    /// removal of its socket file happened before disconnect returned.
    @Test func aUnixPathIsFreeTheMomentDisconnectReturns() throws {
        let path = temporaryUnixPath("relisten")
        defer { unlink(path) }
        let recorder = Recorder()
        for round in 0..<200 {
            let old = Socket(delegate: recorder)
            try old.accept(onUnixPath: path)
            old.disconnect()
            var status = stat()
            #expect(lstat(path, &status) != 0, "round \(round): the socket file outlived disconnect")
            let new = Socket(delegate: recorder)
            try new.accept(onUnixPath: path)
            guard let client = ListenerCloseTests.connectUnix(path) else {
                Issue.record("round \(round): the new listener at \(path) is not reachable")
                return
            }
            close(client)
            new.disconnect()
        }
    }

    /// A listener removes its socket file only while it is still the one its bind made: a
    /// newer listener that replaced it at the same path keeps its file when the older closes.
    @Test func aListenerLeavesANewerListenersFileAlone() throws {
        let path = temporaryUnixPath("replaced")
        defer { unlink(path) }
        let oldRecorder = Recorder("old")
        let recorder = Recorder("new")
        let old = Socket(delegate: oldRecorder)
        try old.accept(onUnixPath: path)
        let new = Socket(delegate: recorder)
        try new.accept(onUnixPath: path) // replaces the old listener's file (as a stale one)
        old.disconnect()
        #expect(oldRecorder.waitForDisconnect() != nil) // its close, and removal, are done
        let client = try #require(ListenerCloseTests.connectUnix(path), "the newer listener's file is gone")
        close(client)
        #expect(recorder.wait { $0.filter { $0 == .accepted }.count == 1 })
        new.disconnect()
        var status = stat()
        #expect(lstat(path, &status) != 0)
    }

    /// From inside the listener's own callback (on its loop): the port is free at once, and
    /// the callback can listen on it again.
    @Test func aListenerDisconnectedInItsOwnCallbackFreesItsPortAtOnce() throws {
        let recorder = Recorder()
        let listener = Socket(delegate: recorder)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        let port = listener.localPort
        let relistened = Latch()
        let failure = LockedValue<SocketError?>(nil)
        recorder.onAccept = { sock, _ in
            sock.disconnect()
            do throws(SocketError) {
                try sock.accept(onInterface: "127.0.0.1", port: port)
            } catch {
                failure.withLock { $0 = error }
            }
            relistened.open()
        }
        let client = try RawSocket.connect(port: port)
        defer { client.close() }
        #expect(relistened.wait())
        #expect(failure.withLock { $0 } == nil)
        #expect(listener.isAccepting && listener.localPort == port)
        listener.disconnect()
    }

    /// The new-connection hook may disconnect its listener: the connection it was asked
    /// about is closed, and no didAccept follows the listener's didDisconnect.
    @Test func aListenerDisconnectedInItsNewConnectionHookAcceptsNothingMore() throws {
        final class Hooked: SocketDelegate, @unchecked Sendable {
            let log = LockedValue<[String]>([])
            let disconnected = Latch()
            func newEventLoop(forConnectionFrom address: SocketAddress, on listener: Socket) -> EventLoop? {
                listener.disconnect()
                return nil
            }
            func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
                log.withLock { $0.append("accepted") }
            }
            func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
                log.withLock { $0.append("disconnected") }
                disconnected.open()
            }
        }
        // A group of its own, never shut down if this fails: a loop stuck in the hook (the
        // disconnect used to wait there for the gate its own thread held) would hang the
        // default group's other users and the shutdown.
        let group = EventLoopGroup(loopCount: 1)
        let delegate = Hooked()
        let listener = Socket(delegate: delegate, eventLoop: group.next())
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        let disconnected = delegate.disconnected.wait()
        #expect(disconnected, "the disconnect made in the hook did not finish")
        guard disconnected else { return }
        #expect(try client.receiveUntilEndOfStream(timeout: 10).isEmpty) // closed unserved
        #expect(delegate.log.withLock { $0 } == ["disconnected"])
        try group.shutdown()
    }
}
