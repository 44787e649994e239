// SPDX-License-Identifier: MIT
/// Text that SocketKit hands to C as a NUL-terminated string: host names (`getaddrinfo`),
/// IP literals (`inet_pton`), interface names (`if_nametoindex`), paths (`open`, `bind`),
/// and every TLS setting OpenSSL reads (the peer name for SNI and verification, file paths,
/// cipher strings, passwords, ALPN names, PEM text).
///
/// C takes the first NUL for the end of the text, so `"localhost\0.evil.test"` would be
/// checked and sent as `"localhost"`: a silent truncation that can turn one name into
/// another. Such text is refused instead, as Python's own `"embedded null character"`.
/// Every public entry that takes text bound for C checks it once, with `checkedForC`;
/// internal code may then pass it to C as it is.
extension String {
    /// True when C sees all of the text: it holds no NUL byte.
    var isCString: Bool { !utf8.contains(0) }

    /// The text itself, or `code` (`.badParam` unless said otherwise) naming `what` when C
    /// would see only the part before a NUL in it.
    @discardableResult
    func checkedForC(_ what: @autoclosure () -> String, code: SocketError.Code = .badParam) throws(SocketError) -> String {
        guard isCString else {
            throw SocketError(code, "\(what()) contains an embedded NUL character (C would see only the text before it)")
        }
        return self
    }
}
