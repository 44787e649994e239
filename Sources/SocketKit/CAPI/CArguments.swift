// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

// What every C function does with its arguments before anything else: each one a C caller
// can get wrong is checked here and turned into SK_ERR_BAD_PARAM with a message naming it;
// nothing below can trap on bad input.

func badParam(_ message: String) -> SocketError {
    SocketError(.badParam, message)
}

/// `size_t` arrives as `Int`: values above `Int.max` wrap to negative.
func checkedLength(_ value: Int, _ name: String) throws(SocketError) -> Int {
    guard value >= 0 else { throw badParam("\(name) is too large") }
    return value
}

/// A required C string.
func string(from pointer: UnsafePointer<CChar>?, _ name: String) throws(SocketError) -> String {
    guard let pointer else { throw badParam("\(name) is NULL") }
    return String(cString: pointer)
}

/// An optional C string (NULL: none).
func optionalString(_ pointer: UnsafePointer<CChar>?) -> String? {
    pointer.map { String(cString: $0) }
}

/// A `SocketAddress` from C, validated: a known family, and at least its struct's size (up
/// to `sockaddr_storage`; see `SocketAddress.init?(bytes:)`).
func socketAddress(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t) throws(SocketError) -> SocketAddress {
    guard let address else { throw badParam("address is NULL") }
    guard length >= 2, length <= socklen_t(MemoryLayout<sockaddr_storage>.size) else {
        throw badParam("address_length \(length) is not a valid address length")
    }
    guard let parsed = SocketAddress(raw: UnsafeRawBufferPointer(start: address, count: Int(length))) else {
        throw badParam("not a complete sockaddr_in, sockaddr_in6 or sockaddr_un")
    }
    return parsed
}
