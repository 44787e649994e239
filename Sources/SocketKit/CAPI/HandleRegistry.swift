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

    /// Taken by every C call that names a handle: an inline lock (one atomic exchange each
    /// way when uncontended) rather than a pthread mutex.
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

    /// Whether `object` is of the class a handle of `kind` stands for. Checked once, when
    /// the handle is made, so that lookups can downcast without a dynamic cast.
    private static func matches(_ object: AnyObject, _ kind: Kind) -> Bool {
        switch kind {
        case .socket: return object is Socket
        case .loopGroup: return object is EventLoopGroup
        case .callbackQueue: return object is CallbackQueue
        case .udpSocket: return object is UdpSocket
        case .tlsSettings: return object is TLSSettingsBox
        }
    }

    /// Registers `object` and returns its new handle.
    func register(_ object: AnyObject, kind: Kind) -> OpaquePointer {
        precondition(HandleRegistry.matches(object, kind), "registered a \(type(of: object)) as \(kind.name)")
        return withLock {
            let slot: Int
            if let reused = freeSlots.popLast() {
                slot = reused
            } else {
                slot = slots.count
                slots.append(Slot())
            }
            slots[slot].kind = kind
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
    /// `withLock`'s closure (which the optimizer left as three calls and a thunk).
    @inline(__always)
    func lookup<Object: AnyObject>(_ handle: OpaquePointer?, _ kind: Kind, as type: Object.Type) -> Object? {
        guard let (slot, generation) = decode(handle) else { return nil }
        let key = parkingKey(of: self)
        lock.lock(key: key)
        let object: AnyObject? = slot < slots.count && slots[slot].generation == generation
            && slots[slot].kind == kind ? slots[slot].object : nil
        lock.unlock(key: key)
        guard let object else { return nil }
        // The kind was checked against the class at registration; `Object` is that class
        // (or a superclass of it) at every call site.
        return RuntimeShortcuts.downcast(object, to: Object.self)
    }

    /// Removes the handle; returns the object it held (the caller drops it outside the lock).
    func remove(_ handle: OpaquePointer?, _ kind: Kind) -> AnyObject? {
        guard let (slot, generation) = decode(handle) else { return nil }
        return withLock {
            guard slot < slots.count, slots[slot].generation == generation, slots[slot].kind == kind else { return nil }
            let object = slots[slot].object
            slots[slot] = Slot(generation: generation &+ 1)
            freeSlots.append(slot)
            return object
        }
    }

    static func invalid(_ kind: Kind) -> SocketError {
        SocketError(.invalidHandle, "the \(kind.name) handle is NULL, released or of another kind")
    }
}

/// Values that cross from C: handles and raw pointers, moved onto loops and queues.
struct CValue<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
