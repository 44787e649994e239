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

private let versionString: StaticString = "0.1.0"
private let versionNumber: UInt32 = 100

@_cdecl("sk_version")
public func sk_version() -> UnsafePointer<CChar>? {
    UnsafeRawPointer(versionString.utf8Start).assumingMemoryBound(to: CChar.self)
}

@_cdecl("sk_version_number")
public func sk_version_number() -> UInt32 {
    versionNumber
}

private let errorNames: [Int32: StaticString] = [
    0: "SK_OK", -1: "SK_ERR_BAD_CONFIG", -2: "SK_ERR_BAD_PARAM", -3: "SK_ERR_CONNECT_TIMEOUT",
    -4: "SK_ERR_READ_TIMEOUT", -5: "SK_ERR_WRITE_TIMEOUT", -6: "SK_ERR_READ_MAXED_OUT", -7: "SK_ERR_CLOSED",
    -8: "SK_ERR_OTHER", -9: "SK_ERR_SYSTEM", -10: "SK_ERR_RESOLUTION", -11: "SK_ERR_INVALID_HANDLE",
    -12: "SK_ERR_SEND_TIMEOUT", -13: "SK_ERR_TRUNCATED", -14: "SK_ERR_TLS_FAILED", -15: "SK_ERR_TLS_CERT_EXPIRED",
    -16: "SK_ERR_TLS_CERT_NOT_YET_VALID", -17: "SK_ERR_TLS_SELF_SIGNED", -18: "SK_ERR_TLS_UNKNOWN_ISSUER",
    -19: "SK_ERR_TLS_HOSTNAME_MISMATCH", -20: "SK_ERR_TLS_CERT_INVALID", -21: "SK_ERR_TLS_CLIENT_CERT_REQUIRED",
    -22: "SK_ERR_TLS_PROTOCOL_VERSION", -23: "SK_ERR_TLS_PEER_CLOSED", -24: "SK_ERR_TLS_HANDSHAKE_TIMEOUT",
    -25: "SK_ERR_TLS_TRUNCATED", -26: "SK_ERR_TLS_PEER_REJECTED", -27: "SK_ERR_TLS_SETTINGS",
    -28: "SK_ERR_WRITE_QUEUE_FULL",
]

private let errorSummaries: [Int32: StaticString] = [
    0: "success",
    -1: "invalid in the socket's current state or configuration",
    -2: "invalid argument",
    -3: "connect timed out",
    -4: "read timed out",
    -5: "write timed out",
    -6: "read reached its maximum length without the separator",
    -7: "socket closed by remote peer",
    -8: "other error",
    -9: "operating system error",
    -10: "host name did not resolve",
    -11: "invalid, released or wrong-kind handle",
    -12: "send timed out",
    -13: "datagram larger than the receive limit",
    -14: "TLS failed",
    -15: "the peer's certificate has expired",
    -16: "the peer's certificate is not yet valid",
    -17: "the peer's certificate is self-signed and not trusted",
    -18: "the peer's certificate chain leads to no trusted root",
    -19: "the peer's certificate does not match the host name",
    -20: "the peer's certificate is not valid",
    -21: "the server requires a client certificate",
    -22: "no TLS protocol version both sides accept",
    -23: "the peer closed the connection during the TLS handshake",
    -24: "the TLS handshake timed out",
    -25: "the peer closed the connection without a TLS close_notify",
    -26: "manual trust evaluation rejected the peer",
    -27: "the TLS settings cannot be used",
    -28: "the write would pass the socket's maximum of queued bytes",
]

private func cString(_ text: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(text.utf8Start).assumingMemoryBound(to: CChar.self)
}

@_cdecl("sk_strerror")
public func sk_strerror(_ code: Int32) -> UnsafePointer<CChar>? {
    cString(errorSummaries[code] ?? "unknown error")
}

@_cdecl("sk_error_name")
public func sk_error_name(_ code: Int32) -> UnsafePointer<CChar>? {
    cString(errorNames[code] ?? "SK_ERR_UNKNOWN")
}
