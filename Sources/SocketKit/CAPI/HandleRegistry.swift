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
    enum Kind: Sendable {
        case socket, loopGroup, callbackQueue

        var name: String {
            switch self {
            case .socket: return "sk_socket_t"
            case .loopGroup: return "sk_loop_group_t"
            case .callbackQueue: return "sk_callback_queue_t"
            }
        }
    }

    private struct Entry {
        let kind: Kind
        let object: AnyObject
    }

    static let shared = HandleRegistry()

    private let lock = Lock()
    private var entries: [UInt: Entry] = [:]
    private var nextIdentifier: UInt = 1

    /// Registers `object` and returns its new handle. Handle values are 16-aligned and
    /// never repeat.
    func register(_ object: AnyObject, kind: Kind) -> OpaquePointer {
        lock.withLock {
            let value = nextIdentifier << 4
            nextIdentifier += 1
            entries[value] = Entry(kind: kind, object: object)
            // A non-zero value always makes a pointer.
            return OpaquePointer(bitPattern: value)!
        }
    }

    func lookup<Object: AnyObject>(_ handle: OpaquePointer?, _ kind: Kind, as type: Object.Type) -> Object? {
        guard let handle else { return nil }
        let value = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))
        return lock.withLock {
            guard let entry = entries[value], entry.kind == kind else { return nil }
            return entry.object as? Object
        }
    }

    /// Removes the handle; returns the object it held (the caller drops it outside the lock).
    func remove(_ handle: OpaquePointer?, _ kind: Kind) -> AnyObject? {
        guard let handle else { return nil }
        let value = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))
        return lock.withLock {
            guard let entry = entries[value], entry.kind == kind else { return nil }
            entries.removeValue(forKey: value)
            return entry.object
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
