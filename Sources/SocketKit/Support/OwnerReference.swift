import SocketKitC

/// A core's reference to the user-facing object that owns it (`Socket`, `UdpSocket`): what a
/// weak reference does, in one word and without a side table.
///
/// A weak reference would give every owner a side table (48 bytes) and send each retain and
/// release of it down the runtime's slow path. Instead this holds the owner's memory with an
/// unowned reference count (the pointer stays valid after the owner's deinit) and `load`
/// takes a strong reference with `swift_tryRetain`, which fails once deinitialization has
/// begun: exactly what loading a weak reference does.
struct OwnerReference<Owner: AnyObject>: ~Copyable {
    private var object: UnsafeMutableRawPointer? = nil

    init() {}

    deinit {
        if let object { swift_unownedRelease(object) }
    }

    /// The owner, or nil once it is being deinitialized (or before `attach`).
    @inline(__always)
    func load() -> Owner? {
        guard let object, let retained = swift_tryRetain(object) else { return nil }
        return Unmanaged<Owner>.fromOpaque(retained).takeRetainedValue()
    }

    /// Called once, by the owner's initializer.
    mutating func attach(_ owner: Owner) {
        assert(object == nil, "a core has one owner")
        let raw = Unmanaged.passUnretained(owner).toOpaque()
        _ = swift_unownedRetain(raw)
        object = raw
    }
}
