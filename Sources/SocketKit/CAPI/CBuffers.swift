// SPDX-License-Identifier: MIT
import Glibc

// How every C function that copies text or bytes of a length the caller cannot know in
// advance (hosts, paths, addresses, certificates) fills the caller's buffer: as snprintf,
// it copies what fits and returns the whole length, so one rule (socketkit.h, CONVENTIONS,
// "Getters") tells the caller both whether the result was cut and how much room it needs.
// A NULL buffer asks for the length alone, whatever the capacity says.

enum CBuffer {
    /// Copies what fits of `bytes` into `buffer` (`capacity` bytes) and returns `bytes.count`,
    /// or SK_ERR_BAD_PARAM for a capacity above `Int.max` (a `size_t` that reads negative).
    static func copy(_ bytes: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawPointer?, capacity: Int) -> Int32 {
        if let buffer {
            guard capacity >= 0 else { return SocketError.Code.badParam.rawValue }
            let count = min(bytes.count, capacity)
            if count > 0 { buffer.copyMemory(from: bytes.baseAddress!, byteCount: count) }
        }
        return Int32(clamping: bytes.count)
    }

    /// Copies what fits of `text` followed by a NUL (when `capacity` is at least 1: the text
    /// is cut at a byte, as snprintf cuts) and returns the text's length without the NUL.
    static func copy(text: String, into buffer: UnsafeMutablePointer<CChar>?, capacity: Int) -> Int32 {
        var text = text
        return text.withUTF8 { utf8 in
            guard let buffer, capacity != 0 else { return Int32(clamping: utf8.count) }
            guard capacity > 0 else { return SocketError.Code.badParam.rawValue }
            let count = min(utf8.count, capacity - 1)
            if count > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: utf8.baseAddress!, byteCount: count) }
            buffer[count] = 0
            return Int32(clamping: utf8.count)
        }
    }
}

/// A host or path getter's answer (see `CBuffer`): SK_ERR_BAD_CONFIG when there is no
/// such text.
func copyText(_ text: String?, into buffer: UnsafeMutablePointer<CChar>?, capacity: Int) -> Int32 {
    guard let text else { return SocketError.Code.badConfig.rawValue }
    return CBuffer.copy(text: text, into: buffer, capacity: capacity)
}

/// An address getter's answer, as getsockname(2) gives it: what fits of `*length` bytes,
/// with `*length` and the result set to the address's whole length (see `CBuffer`).
/// SK_ERR_BAD_CONFIG when there is no such address.
func copyAddress(_ address: SocketAddress?, into destination: UnsafeMutablePointer<sockaddr>?,
                 length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    guard let length else { return SocketError.Code.badParam.rawValue }
    guard let address else { return SocketError.Code.badConfig.rawValue }
    return address.withRawBytes { raw in
        let result = CBuffer.copy(raw, into: destination.map { UnsafeMutableRawPointer($0) }, capacity: Int(length.pointee))
        length.pointee = socklen_t(raw.count)
        return result
    }
}
