// SPDX-License-Identifier: MIT
import SocketKitC

// What the two C delegate structs (sk_socket_delegate_t, sk_udp_socket_delegate_t) share:
// how a receiver takes the caller's struct, and how errors reach a member.

/// The caller's delegate struct, checked by the delegate_size rule and copied (NULL: no
/// delegate). `firstPublished` is the struct's size in its first published header.
///
/// The rule (socketkit.h, ABI), as the kernel checks its extensible structs (openat2,
/// clone3): a whole number of members, at least the first published version (an older
/// header: the members it lacks read as NULL), and beyond the members this library knows
/// (a newer header) only NULL ones, since a set member we do not know would never be
/// called. At most 64 KiB is read.
func copyDelegate<Delegate>(_ source: UnsafePointer<Delegate>?, size: Int, firstPublished: Int, name: String,
                            empty: Delegate) throws(SocketError) -> Delegate? {
    guard let source else { return nil }
    let member = MemoryLayout<UnsafeRawPointer>.size
    let known = MemoryLayout<Delegate>.size
    guard size >= firstPublished, size % member == 0, size <= 64 * 1024 else {
        throw badParam("delegate_size \(size) is not the size of a \(name) (pass sizeof(\(name)); "
                       + "\(firstPublished)...\(known) bytes are known to this library)")
    }
    if size > known {
        let unknown = UnsafeRawBufferPointer(start: UnsafeRawPointer(source) + known, count: size - known)
        if let set = unknown.firstIndex(where: { $0 != 0 }) {
            throw badParam("member \((known + set) / member) of \(name) is set, and this library is older than the "
                           + "header that has it: it would never be called (update the library, or leave the member NULL)")
        }
    }
    var copy = empty
    withUnsafeMutableBytes(of: &copy) { destination in
        destination.copyMemory(from: UnsafeRawBufferPointer(start: source, count: min(size, known)))
    }
    return copy
}

/// Calls `body` with a C copy of `error`, valid for the call.
func withCError<Result>(_ error: SocketError, _ body: (UnsafePointer<sk_error_t>) -> Result) -> Result {
    var converted = sk_error_t()
    fill(&converted, with: error)
    return body(&converted)
}

/// Calls a member that takes an optional error (did_disconnect, did_close).
func withOptionalCError<Result>(_ error: SocketError?, _ body: (UnsafePointer<sk_error_t>?) -> Result) -> Result {
    guard let error else { return body(nil) }
    return withCError(error) { body($0) }
}
