// SPDX-License-Identifier: MIT
import SocketKitC

/// The C API's fast path for calls made from inside a C callback about that callback's own
/// socket, the pattern of every server (`did_read` writes and reads again): while a C
/// callback runs, its socket's handle and object sit in a thread-local slot, and such a call
/// takes the object from there instead of from the handle table, skipping the table's lock
/// and a retain and release of the socket.
///
/// Why it is safe:
/// - the socket object is alive for the whole callback (the delivery holds it);
/// - handles are never reused, and release clears the socket's `cHandle` after taking the
///   handle out of the table, so a handle released inside the callback (then used again)
///   still fails with `SK_ERR_INVALID_HANDLE`, as it does through the table;
/// - a release on another thread waits for the running callback to return (the socket's
///   callback gate) before it clears `cHandle`, so a call made meanwhile is ordered before
///   that release returns, as it could be through the table;
/// - the slot carries the handle's kind, and is restored when the callback returns
///   (callbacks nest: a callback may run the loop of another queue).
enum CallbackScope {
    /// Runs `body` (the C callback) with `object`'s handle in the slot.
    @inline(__always)
    static func with<Object: CSocketObject, Result>(_ object: Object, handle: OpaquePointer?,
                                                    _ body: () -> Result) -> Result {
        let saved = skc_callback_scope_enter(UInt(bitPattern: Int(bitPattern: handle)),
                                             Unmanaged.passUnretained(object).toOpaque(),
                                             UInt(Object.handleKind.rawValue))
        defer { skc_callback_scope_leave(saved) }
        return body()
    }

    /// The socket of the running callback, if `handle` is its live handle.
    @inline(__always)
    static func current<Object: CSocketObject>(_ handle: OpaquePointer?, as type: Object.Type) -> Unmanaged<Object>? {
        let raw = UInt(bitPattern: Int(bitPattern: handle))
        guard let object = skc_callback_scope_object(raw, UInt(Object.handleKind.rawValue)) else { return nil }
        let socket = Unmanaged<Object>.fromOpaque(object)
        guard RuntimeShortcuts.withUnretained(socket, { $0.cHandle.load(ordering: .acquiring) }) == raw else { return nil }
        return socket
    }
}
