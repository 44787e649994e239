// SPDX-License-Identifier: MIT
import SocketKitC

/// The engine's direct uses of the Swift runtime's reference counting: the one place that
/// calls underscored reference API or `swift_*` runtime entry points (declared in the C shim,
/// as the toolchain installs no header for them), for the hot paths where the ordinary
/// construct costs a retain and a release, or a side table, per event.
///
/// - `withUnretained`: calls into an object held through `Unmanaged` without the retain and
///   release that `takeUnretainedValue()` puts around the call. The caller guarantees the
///   object lives for the call (a receive batch holds its owner and receiver; a C callback's
///   scope holds its socket).
/// - `downcast`: a cast checked once beforehand (the handle table checks an object's class
///   against its handle's kind when the handle is made).
/// - `OwnerReference` (its own file): a weak reference in one word, without a side table.
/// - `isOnlyReference` is not a shortcut but what holding through `Unmanaged` needs: the
///   language's `isKnownUniquelyReferenced` wants a strong reference of its own, which
///   would itself be a second one.
///
/// What they save: bench/README.md, "Speed tricks". Switching them off: build with
/// `-Xswiftc -DSOCKETKIT_NO_RUNTIME_SHORTCUTS` (for the shipping library, `make library
/// EXTRA_RELEASE_FLAGS=-Xswiftc\ -DSOCKETKIT_NO_RUNTIME_SHORTCUTS`): `withUnretained` then
/// takes the object with `takeUnretainedValue()`, `downcast` is a checked cast and
/// `OwnerReference` a weak reference; behaviour is the same.
enum RuntimeShortcuts {
    /// Runs `body` with the object `reference` stands for, which the caller keeps alive.
    static func withUnretained<Object: AnyObject, Result>(
        _ reference: Unmanaged<Object>, _ body: (Object) throws -> Result
    ) rethrows -> Result {
        #if SOCKETKIT_NO_RUNTIME_SHORTCUTS
        return try body(reference.takeUnretainedValue())
        #else
        return try reference._withUnsafeGuaranteedRef(body)
        #endif
    }

    /// `object` as the class `Object`, which the caller has already checked it is.
    static func downcast<Object: AnyObject>(_ object: AnyObject, to type: Object.Type) -> Object {
        assert(object is Object)
        #if SOCKETKIT_NO_RUNTIME_SHORTCUTS
        return object as! Object
        #else
        return unsafeDowncast(object, to: Object.self)
        #endif
    }

    /// Whether the strong reference the caller holds through `reference` is the object's
    /// only one.
    static func isOnlyReference<Object: AnyObject>(_ reference: Unmanaged<Object>) -> Bool {
        swift_isUniquelyReferenced_nonNull_native(reference.toOpaque())
    }

    // For `OwnerReference`.

    /// A strong reference to `object`, or nil once its deinitialization has begun.
    static func tryRetain<Object: AnyObject>(_ object: UnsafeMutableRawPointer, as type: Object.Type) -> Object? {
        guard let retained = swift_tryRetain(object) else { return nil }
        return Unmanaged<Object>.fromOpaque(retained).takeRetainedValue()
    }

    /// Keeps `object`'s memory (not the object) until `unownedRelease`: what an unowned
    /// reference holds.
    static func unownedRetain(_ object: AnyObject) -> UnsafeMutableRawPointer {
        let raw = Unmanaged.passUnretained(object).toOpaque()
        _ = swift_unownedRetain(raw)
        return raw
    }

    static func unownedRelease(_ object: UnsafeMutableRawPointer) {
        swift_unownedRelease(object)
    }
}
