// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// Fills a caller's `sk_error_t` (when not NULL).
func fill(_ destination: UnsafeMutablePointer<sk_error_t>?, with error: SocketError?) {
    guard let destination else { return }
    guard let error else {
        // Success, on every call: three stores (no pass over the 256-byte message).
        destination.pointee.code = 0
        destination.pointee.os_error = 0
        let message = MemoryLayout<sk_error_t>.offset(of: \sk_error_t.message)!
        UnsafeMutableRawPointer(destination).storeBytes(of: 0, toByteOffset: message, as: UInt8.self)
        return
    }
    destination.pointee.code = error.code.rawValue
    destination.pointee.os_error = error.osError
    copyMessage(error.message, into: destination)
}

/// Copies as much of `message` as fits, whole characters only, NUL-terminated.
private func copyMessage(_ message: String, into destination: UnsafeMutablePointer<sk_error_t>) {
    withUnsafeMutableBytes(of: &destination.pointee.message) { buffer in
        let room = buffer.count - 1
        var length = 0
        for scalar in message.unicodeScalars {
            var encoded: [UInt8] = []
            UTF8.encode(scalar) { encoded.append($0) }
            guard length + encoded.count <= room else { break }
            for byte in encoded {
                buffer[length] = byte
                length += 1
            }
        }
        buffer[length] = 0
    }
}

/// Reports `error` through the out-parameter and returns its code.
@inline(__always)
func failed(_ error: SocketError, _ destination: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    fill(destination, with: error)
    return error.code.rawValue
}

/// Clears the out-parameter and returns SK_OK.
@inline(__always)
func succeeded(_ destination: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    if destination != nil { fill(destination, with: nil) }
    return 0
}

/// Runs `body`, turning a thrown `SocketError` into a code (and the out-parameter).
@inline(__always)
func reporting(_ destination: UnsafeMutablePointer<sk_error_t>?, _ body: () throws(SocketError) -> Void) -> Int32 {
    do {
        try body()
        return succeeded(destination)
    } catch {
        return failed(error, destination)
    }
}

// Both from the header's version block (SocketKitVersion).

@_cdecl("sk_version")
public func sk_version() -> UnsafePointer<CChar>? {
    skc_version_string()
}

@_cdecl("sk_version_number")
public func sk_version_number() -> UInt32 {
    UInt32(SocketKitVersion.number)
}

// Both from the table generated from docs/EVENTS_AND_ERRORS.md (SocketErrorCodes.swift).

private func cString(_ text: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(text.utf8Start).assumingMemoryBound(to: CChar.self)
}

@_cdecl("sk_strerror")
public func sk_strerror(_ code: Int32) -> UnsafePointer<CChar>? {
    cString(SocketError.Code.entry(SocketError.Code(rawValue: code))?.summary ?? "unknown error")
}

@_cdecl("sk_error_name")
public func sk_error_name(_ code: Int32) -> UnsafePointer<CChar>? {
    cString(SocketError.Code.entry(SocketError.Code(rawValue: code))?.cName ?? "SK_ERR_UNKNOWN")
}
