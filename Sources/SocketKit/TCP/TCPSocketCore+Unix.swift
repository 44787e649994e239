// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// The descriptors a Unix-domain connection received (SCM_RIGHTS) and nobody took yet. Out of
/// line (`OutOfLineState.unixExtras`): most connections never receive any. (Writes that
/// pass descriptors are queued writes: `WriteRequest.Storage.passing`.)
final class UnixExtras {
    /// Descriptors the peer passed and the user has not taken (`takeReceivedDescriptors`),
    /// in the order they came. Owned here until taken.
    var received: [Int32] = []
    /// Set by a read whose descriptors could not all be kept: the session ends with it once
    /// that read's bytes have been handed on.
    var droppedError: SocketError? = nil

    func takeDroppedError() -> SocketError? {
        defer { droppedError = nil }
        return droppedError
    }

    func closeReceived() {
        for descriptor in received { close(descriptor) }
        received.removeAll()
    }

    deinit { closeReceived() }
}

/// The credentials of the process at the other end of a Unix-domain connection, as the
/// kernel recorded them when the connection was made (SO_PEERCRED).
public struct PeerCredentials: Hashable, Sendable {
    public let processID: Int32
    public let userID: UInt32
    public let groupID: UInt32
}

extension TCPSocketCore {
    /// Descriptors the peer passed and nobody took, at most: a peer that sends more ends
    /// the connection (each one is an open file of this process).
    static let maximumHeldDescriptors = 1024

    var unixExtras: UnixExtras {
        if let extras = existingUnixExtras { return extras }
        let extras = UnixExtras()
        outOfLine.unixExtras = extras
        return extras
    }

    /// Whether reads keep passed descriptors, from the configuration: set when a session
    /// becomes connected and when the setting changes.
    func updateReceivesDescriptors() {
        receivesDescriptors = phase == .connected && isUnixDomain && configuration.receivesDescriptors
    }

    /// `recvmsg` in place of `read` (see `pumpReads`): the bytes, with the descriptors that
    /// came with them kept for `takeReceivedDescriptors`. Descriptors the kernel had to drop
    /// (MSG_CTRUNC: this process is out of descriptors) or past `maximumHeldDescriptors`
    /// end the session once the bytes read with them have been handed on
    /// (`UnixExtras.droppedError`).
    func readKeepingDescriptors(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        withUnsafeTemporaryAllocation(of: Int32.self, capacity: Int(SKC_MAX_PASSED_DESCRIPTORS)) { fds in
            var count: Int32 = 0
            var truncated: Int32 = 0
            let result = skc_read_with_descriptors(fd, buffer.baseAddress, buffer.count, fds.baseAddress, &count,
                                                   &truncated)
            let extras = unixExtras
            if count > 0 {
                for index in 0..<Int(count) {
                    if extras.received.count < TCPSocketCore.maximumHeldDescriptors {
                        extras.received.append(fds[index])
                    } else {
                        close(fds[index])
                        extras.droppedError = SocketError(.other, "the peer passed more than \(TCPSocketCore.maximumHeldDescriptors) descriptors that were not taken (takeReceivedDescriptors)")
                    }
                }
            }
            if truncated != 0 && extras.droppedError == nil {
                extras.droppedError = SocketError(.other, "descriptors the peer passed were dropped by the kernel (MSG_CTRUNC: is the process out of descriptors?)")
            }
            return result
        }
    }

    /// The loop side of `Socket.takeReceivedDescriptors`: up to `limit`, in order; the
    /// caller owns them.
    func takeReceivedDescriptors(limit: Int) -> [Int32] {
        guard let extras = existingUnixExtras, !extras.received.isEmpty else { return [] }
        let taken = Array(extras.received.prefix(limit))
        extras.received.removeFirst(taken.count)
        return taken
    }

    /// How many passed descriptors wait to be taken.
    var heldReceivedDescriptors: Int { existingUnixExtras?.received.count ?? 0 }

    /// Closes the descriptors the last session received and nobody took (a new session
    /// begins: they were the old connection's).
    func closeHeldDescriptors() {
        existingUnixExtras?.closeReceived()
    }

    /// The loop side of `Socket.peerCredentials`.
    func peerCredentials() throws(SocketError) -> PeerCredentials {
        guard phase == .connected, fd >= 0, isUnixDomain else {
            throw SocketError(.badConfig, "peer credentials belong to a connected Unix-domain socket")
        }
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
        guard skc_peer_credentials(fd, &pid, &uid, &gid) == 0 else {
            throw SocketError.lastSystemError("getsockopt(SO_PEERCRED)")
        }
        return PeerCredentials(processID: pid, userID: uid, groupID: gid)
    }
}
