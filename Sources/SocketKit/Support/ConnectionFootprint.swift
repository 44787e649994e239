// SPDX-License-Identifier: MIT
import SocketKitC

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
    /// The bytes the heap set aside for `object`: its instance size rounded up to the
    /// allocator's granule, what it costs.
    static func heapBytes(of object: AnyObject) -> Int {
        Int(skc_heap_bytes(Unmanaged.passUnretained(object).toOpaque()))
    }
}
