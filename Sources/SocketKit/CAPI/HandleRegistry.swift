// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// The C API's handles: opaque values mapped to live objects. A handle is never reused, so
/// a released or stale handle, a NULL, or a handle of another kind is recognised and
/// refused with `SK_ERR_INVALID_HANDLE` instead of being dereferenced.
///
/// The registry holds one strong reference per handle; everything else is reference
/// counted inside (a socket keeps its queue and loop alive), so handles may be released in
/// any order.
final class HandleRegistry: @unchecked Sendable {
    enum Kind: UInt8, Sendable {
        case socket = 1, loopGroup, callbackQueue, udpSocket, tlsSettings

        var name: String {
            switch self {
            case .socket: return "sk_socket_t"
            case .loopGroup: return "sk_loop_group_t"
            case .callbackQueue: return "sk_callback_queue_t"
            case .udpSocket: return "sk_udp_socket_t"
            case .tlsSettings: return "sk_tls_settings_t"
            }
        }
    }

    private struct Slot {
        var generation: UInt32 = 0
        var kind: Kind? = nil
        var object: AnyObject? = nil
    }

    static let shared = HandleRegistry()

    /// Taken by every C call that names a handle (except from inside that socket's own
    /// callback: `CallbackScope`): an inline lock rather than a pthread mutex.
    private let lock = InlineLock()
    private var slots: [Slot] = []
    private var freeSlots: [Int] = []

    // A handle is (generation << 24 | slot + 1) << 4: never 0, 16-aligned, and a released
    // slot's next handle differs in generation, so stale handles are recognised (a slot is
    // only reused after 2^32 releases of it).
    private static let slotBits = 24

    @inline(__always)
    private func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        let key = parkingKey(of: self)
        lock.lock(key: key)
        defer { lock.unlock(key: key) }
        return try body()
    }

    /// Registers `object` and returns its new handle. A kind stands for one class
    /// (`CHandleObject`), so lookups can downcast without a dynamic cast.
    fileprivate func register<Object: CHandleObject>(_ object: Object) -> OpaquePointer {
        withLock {
            let slot: Int
            if let reused = freeSlots.popLast() {
                slot = reused
            } else {
                slot = slots.count
                slots.append(Slot())
            }
            slots[slot].kind = Object.handleKind
            slots[slot].object = object
            let value = (UInt(slots[slot].generation) << HandleRegistry.slotBits | UInt(slot + 1)) << 4
            return OpaquePointer(bitPattern: value)!
        }
    }

    /// The slot and generation a handle names, if it can name one at all.
    private func decode(_ handle: OpaquePointer?) -> (slot: Int, generation: UInt32)? {
        guard let handle else { return nil }
        let value = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))
        guard value & 0xF == 0 else { return nil }
        let index = Int((value >> 4) & ((1 << HandleRegistry.slotBits) - 1))
        let generation = (value >> 4) >> HandleRegistry.slotBits
        guard index > 0, generation <= UInt(UInt32.max) else { return nil }
        return (index - 1, UInt32(generation))
    }

    /// Every C call that names a handle comes here, so it is written out without
    /// `withLock`'s closure (which the optimizer does not flatten).
    @inline(__always)
    fileprivate func lookup<Object: CHandleObject>(_ handle: OpaquePointer?, as type: Object.Type) -> Object? {
        guard let (slot, generation) = decode(handle) else { return nil }
        let key = parkingKey(of: self)
        lock.lock(key: key)
        let object: AnyObject? = slot < slots.count && slots[slot].generation == generation
            && slots[slot].kind == Object.handleKind ? slots[slot].object : nil
        lock.unlock(key: key)
        guard let object else { return nil }
        // Only `register` fills a slot, with an `Object` for `Object.handleKind`.
        return RuntimeShortcuts.downcast(object, to: Object.self)
    }

    /// Removes the handle; returns the object it held (the caller drops it outside the lock).
    fileprivate func remove<Object: CHandleObject>(_ handle: OpaquePointer?, as type: Object.Type) -> Object? {
        guard let (slot, generation) = decode(handle) else { return nil }
        let object: AnyObject? = withLock {
            guard slot < slots.count, slots[slot].generation == generation,
                  slots[slot].kind == Object.handleKind else { return nil }
            let object = slots[slot].object
            slots[slot] = Slot(generation: generation &+ 1)
            freeSlots.append(slot)
            return object
        }
        return object.map { unsafeDowncast($0, to: Object.self) }
    }
}

/// An object the C API hands out behind handles of one kind: sockets, UDP sockets, loop
/// groups, callback queues, TLS settings. Every handle check of the C API goes through this
/// protocol's functions.
protocol CHandleObject: AnyObject {
    static var handleKind: HandleRegistry.Kind { get }
}

extension CHandleObject {
    /// The object behind `handle`, or nil for a NULL, released, stale or other-kind handle.
    @inline(__always)
    static func lookup(_ handle: OpaquePointer?) -> Self? {
        HandleRegistry.shared.lookup(handle, as: Self.self)
    }

    /// The object behind `handle`, or SK_ERR_INVALID_HANDLE naming the handle's C type.
    static func resolve(_ handle: OpaquePointer?) throws(SocketError) -> Self {
        guard let object = lookup(handle) else { throw invalidHandle }
        return object
    }

    /// Takes `handle` out of the table and returns its object, or nil when it names none.
    static func removeHandle(_ handle: OpaquePointer?) -> Self? {
        HandleRegistry.shared.remove(handle, as: Self.self)
    }

    /// A new handle for this object; the table holds it until the handle is released.
    func makeHandle() -> OpaquePointer {
        HandleRegistry.shared.register(self)
    }

    static var invalidHandle: SocketError {
        SocketError(.invalidHandle, "the \(handleKind.name) handle is NULL, released or of another kind")
    }
}

/// Values that cross from C: handles and raw pointers, moved onto loops and queues.
struct CValue<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
