// SPDX-License-Identifier: MIT
/// A core's reference to the user-facing object that owns it (`Socket`, `UdpSocket`): what a
/// weak reference does, in one word and without a side table.
///
/// A weak reference gives every owner a side table (an allocation of its own) and sends each
/// retain and release of the owner down the runtime's slow path. Instead this holds the
/// owner's memory with an unowned reference count (the pointer stays valid after the owner's
/// deinit) and `load` takes a strong reference with the runtime's `swift_tryRetain`, which
/// fails once deinitialization has begun: exactly what loading a weak reference does.
///
/// One of the `RuntimeShortcuts` (what it saves and how to switch it off are there): with
/// `SOCKETKIT_NO_RUNTIME_SHORTCUTS` it is a plain weak reference.
struct OwnerReference<Owner: AnyObject>: ~Copyable {
    #if SOCKETKIT_NO_RUNTIME_SHORTCUTS
    private weak var object: Owner? = nil

    init() {}

    func load() -> Owner? { object }

    mutating func attach(_ owner: Owner) {
        assert(object == nil, "a core has one owner")
        object = owner
    }
    #else
    private var object: UnsafeMutableRawPointer? = nil

    init() {}

    deinit {
        if let object { RuntimeShortcuts.unownedRelease(object) }
    }

    /// The owner, or nil once it is being deinitialized (or before `attach`).
    func load() -> Owner? {
        guard let object else { return nil }
        return RuntimeShortcuts.tryRetain(object, as: Owner.self)
    }

    /// Called once, by the owner's initializer.
    mutating func attach(_ owner: Owner) {
        assert(object == nil, "a core has one owner")
        object = RuntimeShortcuts.unownedRetain(owner)
    }
    #endif
}
