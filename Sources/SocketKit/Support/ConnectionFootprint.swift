// SPDX-License-Identifier: MIT

/// What a connection costs in memory, and the layout rules that keep it small: the field
/// order and one-word representations the engine relies on for memory per connection. What
/// each rule saves: bench/README.md, "Speed tricks".
///
/// - Field order. Swift lays a class's stored properties out in declaration order, each at
///   its alignment, so a one-byte field between two eight-byte ones costs eight bytes. The
///   flags of `TCPSocketCore` are declared where they fill the padding after wider fields; a
///   field added elsewhere can grow every connection by the heap's granule (16 bytes).
/// - State most connections never need sits behind one optional reference
///   (`TCPSocketCore.OutOfLineState`: TLS, timers, connecting, accepting, the queues behind
///   the first operation; `ProgressBox`), so a connection without it carries one word.
/// - One word where a library type would take more or allocate: `ByteQueue` (the prebuffer,
///   its bookkeeping inside its block), `OwnerReference` (no side table), `InlineLock` and
///   `InlineCallbackGate` (no mutex allocation), `CompactSocketAddress` (addresses inline).
///
/// Switching it off: nothing to switch. `ConnectionFootprintTests` checks the heap bytes of
/// a connection's objects against today's, so a change that grows them says so.
enum ConnectionFootprint {
    /// The bytes the heap sets aside for an instance of `object`'s class, what it costs: its
    /// instance size rounded up as glibc's malloc rounds a request (16-byte granules with an
    /// 8-byte header, 32 at least; the caller may use the chunk less its header).
    ///
    /// Not `malloc_usable_size` of the object itself: malloc may hand out a free chunk one
    /// granule larger than asked rather than split off a remainder too small to keep, so the
    /// same object measured 200 bytes in one run and 216 in another (a CI run, with a busier
    /// heap). This depends on the class alone.
    static func heapBytes(of object: AnyObject) -> Int {
        let chunk = max(32, (instanceSize(of: type(of: object)) + 8 + 15) & ~15)
        return chunk - 8
    }

    /// The instance size Swift allocates for `type` (header included), from its class
    /// metadata: without Objective-C interop (Linux), `instanceSize` is the 32-bit field
    /// after the kind, the superclass, the flags and the instance address point.
    static func instanceSize(of type: AnyClass) -> Int {
        Int(unsafeBitCast(type, to: UnsafeRawPointer.self).load(fromByteOffset: 24, as: UInt32.self))
    }
}
