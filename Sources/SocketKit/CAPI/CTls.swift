// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

// The TLS part of the C API: sk_tls_settings_t (a locked TLSSettings value behind a
// handle), sk_socket_start_tls and the trust, info and certificate helpers.

/// What an `sk_tls_settings_t` handle stands for: settings that setters change and
/// `sk_socket_start_tls` copies.
final class TLSSettingsBox: CHandleObject, @unchecked Sendable {
    static var handleKind: HandleRegistry.Kind { .tlsSettings }
    let value: LockedValue<TLSSettings>
    init(_ settings: TLSSettings) { value = LockedValue(settings) }
}

/// Changes the settings behind `handle`: SK_OK, SK_ERR_INVALID_HANDLE or SK_ERR_BAD_PARAM.
private func change(_ handle: OpaquePointer?, _ body: (inout TLSSettings) throws(SocketError) -> Void) -> Int32 {
    do throws(SocketError) {
        let box = try TLSSettingsBox.resolve(handle)
        try box.value.withLock { (settings: inout TLSSettings) throws(SocketError) in try body(&settings) }
        return 0
    } catch {
        return error.code.rawValue
    }
}

/// `length` bytes of text, or a NUL-terminated string when `length` is 0.
private func text(_ pointer: UnsafePointer<CChar>?, _ length: Int, _ name: String) throws(SocketError) -> String {
    guard let pointer else { throw badParam("\(name) is NULL") }
    if length == 0 { return String(cString: pointer) }
    let checked = try checkedLength(length, "length")
    return pointer.withMemoryRebound(to: UInt8.self, capacity: checked) {
        String(decoding: UnsafeBufferPointer(start: $0, count: checked), as: UTF8.self)
    }
}

private func path(_ pointer: UnsafePointer<CChar>?, _ name: String) throws(SocketError) -> String {
    guard let pointer, pointer.pointee != 0 else { throw badParam("\(name) is NULL or empty") }
    return String(cString: pointer)
}

private func version(_ value: Int32) throws(SocketError) -> TLSSettings.ProtocolVersion? {
    if value == 0 { return nil }
    guard let version = TLSSettings.ProtocolVersion(rawValue: value) else {
        throw badParam("unknown TLS version 0x\(String(value, radix: 16))")
    }
    return version
}

// MARK: Settings

@_cdecl("sk_tls_settings_create")
public func sk_tls_settings_create(_ role: Int32, _ outSettings: UnsafeMutablePointer<OpaquePointer?>?,
                                   _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outSettings else { throw badParam("out_settings is NULL") }
        let kind: TLSSettings.Role
        switch role {
        case Int32(SK_TLS_CLIENT.rawValue): kind = .client
        case Int32(SK_TLS_SERVER.rawValue): kind = .server
        default: throw badParam("role must be SK_TLS_CLIENT or SK_TLS_SERVER")
        }
        outSettings.pointee = TLSSettingsBox(TLSSettings(role: kind)).makeHandle()
    }
}

@_cdecl("sk_tls_settings_release")
public func sk_tls_settings_release(_ settings: OpaquePointer?) -> Int32 {
    TLSSettingsBox.removeHandle(settings) == nil ? SocketError.Code.invalidHandle.rawValue : 0
}

@_cdecl("sk_tls_settings_set_peer_name")
public func sk_tls_settings_set_peer_name(_ settings: OpaquePointer?, _ name: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { $0.peerName = optionalString(name) }
}

@_cdecl("sk_tls_settings_set_trust_system")
public func sk_tls_settings_set_trust_system(_ settings: OpaquePointer?) -> Int32 {
    change(settings) { $0.trustRoots = .system }
}

@_cdecl("sk_tls_settings_set_trust_file")
public func sk_tls_settings_set_trust_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in settings.trustRoots = .file(try path(file, "path")) }
}

@_cdecl("sk_tls_settings_set_trust_directory")
public func sk_tls_settings_set_trust_directory(_ settings: OpaquePointer?, _ directory: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.trustRoots = .directory(try path(directory, "path"))
    }
}

@_cdecl("sk_tls_settings_set_trust_pem")
public func sk_tls_settings_set_trust_pem(_ settings: OpaquePointer?, _ pem: UnsafePointer<CChar>?, _ length: Int) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in settings.trustRoots = .pem(try text(pem, length, "pem")) }
}

@_cdecl("sk_tls_settings_set_certificate_chain_file")
public func sk_tls_settings_set_certificate_chain_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.certificateChain = .file(try path(file, "path"))
    }
}

@_cdecl("sk_tls_settings_set_certificate_chain_pem")
public func sk_tls_settings_set_certificate_chain_pem(_ settings: OpaquePointer?, _ pem: UnsafePointer<CChar>?,
                                                      _ length: Int) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.certificateChain = .pem(try text(pem, length, "pem"))
    }
}

@_cdecl("sk_tls_settings_set_private_key_file")
public func sk_tls_settings_set_private_key_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?,
                                                 _ password: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.privateKey = .file(try path(file, "path"))
        settings.privateKeyPassword = optionalString(password)
    }
}

@_cdecl("sk_tls_settings_set_private_key_pem")
public func sk_tls_settings_set_private_key_pem(_ settings: OpaquePointer?, _ pem: UnsafePointer<CChar>?, _ length: Int,
                                                _ password: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.privateKey = .pem(try text(pem, length, "pem"))
        settings.privateKeyPassword = optionalString(password)
    }
}

@_cdecl("sk_tls_settings_set_pkcs12_file")
public func sk_tls_settings_set_pkcs12_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?,
                                            _ password: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        guard let file else {
            settings.pkcs12 = nil
            return
        }
        settings.pkcs12 = .file(try path(file, "path"), password: optionalString(password))
    }
}

@_cdecl("sk_tls_settings_set_pkcs12_data")
public func sk_tls_settings_set_pkcs12_data(_ settings: OpaquePointer?, _ bytes: UnsafeRawPointer?, _ length: Int,
                                            _ password: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        guard let bytes else {
            settings.pkcs12 = nil
            return
        }
        let checked = try checkedLength(length, "length")
        guard checked > 0 else { throw badParam("the PKCS#12 data is empty") }
        settings.pkcs12 = .data(Array(UnsafeRawBufferPointer(start: bytes, count: checked)), password: optionalString(password))
    }
}

@_cdecl("sk_tls_settings_set_crl_files")
public func sk_tls_settings_set_crl_files(_ settings: OpaquePointer?, _ paths: UnsafePointer<UnsafePointer<CChar>?>?,
                                          _ count: Int) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        let checked = try checkedLength(count, "count")
        guard checked <= 256 else { throw badParam("at most 256 CRL files") }
        var files: [String] = []
        if checked > 0 {
            guard let paths else { throw badParam("paths is NULL") }
            for index in 0..<checked { files.append(try path(paths[index], "paths[\(index)]")) }
        }
        settings.crlFiles = files
    }
}

@_cdecl("sk_tls_settings_set_crl_check_whole_chain")
public func sk_tls_settings_set_crl_check_whole_chain(_ settings: OpaquePointer?, _ enabled: Int32) -> Int32 {
    change(settings) { $0.crlCheckWholeChain = enabled != 0 }
}

@_cdecl("sk_tls_settings_set_ocsp_response_file")
public func sk_tls_settings_set_ocsp_response_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        settings.ocspResponseFile = try file.map { (file: UnsafePointer<CChar>) throws(SocketError) in try path(file, "path") }
    }
}

@_cdecl("sk_tls_settings_set_request_ocsp_staple")
public func sk_tls_settings_set_request_ocsp_staple(_ settings: OpaquePointer?, _ enabled: Int32) -> Int32 {
    change(settings) { $0.requestOCSPStaple = enabled != 0 }
}

@_cdecl("sk_tls_settings_set_require_ocsp_staple")
public func sk_tls_settings_set_require_ocsp_staple(_ settings: OpaquePointer?, _ enabled: Int32) -> Int32 {
    change(settings) { $0.requireOCSPStaple = enabled != 0 }
}

@_cdecl("sk_tls_settings_set_verification")
public func sk_tls_settings_set_verification(_ settings: OpaquePointer?, _ verification: Int32) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        switch verification {
        case Int32(SK_TLS_VERIFY_DEFAULT.rawValue): settings.peerVerification = nil
        case Int32(SK_TLS_VERIFY_NONE.rawValue): settings.peerVerification = TLSSettings.PeerVerification.none
        case Int32(SK_TLS_VERIFY_PEER.rawValue): settings.peerVerification = .verify
        case Int32(SK_TLS_VERIFY_REQUIRE_CERTIFICATE.rawValue): settings.peerVerification = .requireCertificate
        default: throw badParam("unknown verification mode \(verification)")
        }
    }
}

@_cdecl("sk_tls_settings_set_versions")
public func sk_tls_settings_set_versions(_ settings: OpaquePointer?, _ minimum: Int32, _ maximum: Int32) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        let low = try version(minimum) ?? .tls1_2
        let high = try version(maximum)
        if let high, high < low { throw badParam("the maximum TLS version is below the minimum") }
        settings.minimumVersion = low
        settings.maximumVersion = high
    }
}

@_cdecl("sk_tls_settings_set_cipher_list")
public func sk_tls_settings_set_cipher_list(_ settings: OpaquePointer?, _ list: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { $0.cipherList = optionalString(list) }
}

@_cdecl("sk_tls_settings_set_cipher_suites")
public func sk_tls_settings_set_cipher_suites(_ settings: OpaquePointer?, _ suites: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { $0.cipherSuites = optionalString(suites) }
}

@_cdecl("sk_tls_settings_set_alpn_protocols")
public func sk_tls_settings_set_alpn_protocols(_ settings: OpaquePointer?,
                                               _ protocols: UnsafePointer<UnsafePointer<CChar>?>?,
                                               _ count: Int) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        let checked = try checkedLength(count, "count")
        guard checked <= 64 else { throw badParam("at most 64 ALPN protocols") }
        var names: [String] = []
        if checked > 0 {
            guard let protocols else { throw badParam("protocols is NULL") }
            for index in 0..<checked {
                guard let name = protocols[index] else { throw badParam("protocols[\(index)] is NULL") }
                let text = String(cString: name)
                guard !text.utf8.isEmpty, text.utf8.count <= 255 else {
                    throw badParam("an ALPN protocol name must have 1 to 255 bytes")
                }
                names.append(text)
            }
        }
        settings.alpnProtocols = names
    }
}

@_cdecl("sk_tls_settings_set_session_resumption")
public func sk_tls_settings_set_session_resumption(_ settings: OpaquePointer?, _ enabled: Int32) -> Int32 {
    change(settings) { $0.sessionResumption = enabled != 0 }
}

@_cdecl("sk_tls_settings_set_handshake_timeout")
public func sk_tls_settings_set_handshake_timeout(_ settings: OpaquePointer?, _ seconds: Double) -> Int32 {
    change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        guard !seconds.isNaN else { throw badParam("the handshake timeout is NaN") }
        settings.handshakeTimeout = seconds
    }
}

@_cdecl("sk_tls_settings_set_key_log_file")
public func sk_tls_settings_set_key_log_file(_ settings: OpaquePointer?, _ file: UnsafePointer<CChar>?) -> Int32 {
    change(settings) { $0.keyLogFile = optionalString(file) }
}

@_cdecl("sk_tls_settings_set_manual_trust_evaluation")
public func sk_tls_settings_set_manual_trust_evaluation(_ settings: OpaquePointer?, _ enabled: Int32) -> Int32 {
    change(settings) { $0.manualTrustEvaluation = enabled != 0 }
}

@_cdecl("sk_tls_settings_set_server_name_settings")
public func sk_tls_settings_set_server_name_settings(_ settings: OpaquePointer?, _ name: UnsafePointer<CChar>?,
                                                     _ named: OpaquePointer?) -> Int32 {
    // The named settings' value now (a copy), read before the target's lock is taken: the
    // two may be one handle, and that is refused (no names inside names) only at check.
    var value: TLSSettings?
    if named != nil {
        do throws(SocketError) { value = try TLSSettingsBox.resolve(named).value.withLock { $0 } } catch {
            return error.code.rawValue
        }
    }
    return change(settings) { (settings: inout TLSSettings) throws(SocketError) in
        let key = try path(name, "name")
        settings.serverNames[key] = value
    }
}

@_cdecl("sk_tls_settings_check")
public func sk_tls_settings_check(_ settings: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        let value = try TLSSettingsBox.resolve(settings).value.withLock { $0 }
        _ = try TLSContext.forSettings(value)
    }
}

// MARK: Sockets

@_cdecl("sk_socket_start_tls")
public func sk_socket_start_tls(_ sock: OpaquePointer?, _ settings: OpaquePointer?,
                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(sock, error) { (socket) throws(SocketError) in
        let value = try settings.map { (handle: OpaquePointer) throws(SocketError) in
            try TLSSettingsBox.resolve(handle).value.withLock { $0 }
        } ?? TLSSettings()
        try socket.startTLS(value)
    }
}

@_cdecl("sk_socket_answer_trust")
public func sk_socket_answer_trust(_ sock: OpaquePointer?, _ token: UInt64, _ accept: Int32) -> Int32 {
    Socket.answer(sock) { socket in
        socket.answerTrust(question: token, accept: accept != 0)
        return 0
    }
}

@_cdecl("sk_socket_is_secure")
public func sk_socket_is_secure(_ sock: OpaquePointer?) -> Int32 {
    Socket.flag(sock) { $0.isSecure }
}

/// Copies `text` into a fixed C array field, cut to fit (whole UTF-8 sequences).
private func copy<Field>(_ text: String, into field: inout Field) {
    withUnsafeMutableBytes(of: &field) { buffer in
        var length = 0
        for scalar in text.unicodeScalars {
            var encoded: [UInt8] = []
            UTF8.encode(scalar) { encoded.append($0) }
            guard length + encoded.count <= buffer.count - 1 else { break }
            for byte in encoded {
                buffer[length] = byte
                length += 1
            }
        }
        buffer[length] = 0
    }
}

@_cdecl("sk_socket_get_tls_info")
public func sk_socket_get_tls_info(_ sock: OpaquePointer?, _ outInfo: UnsafeMutablePointer<sk_tls_info_t>?) -> Int32 {
    do throws(SocketError) {
        let socket = try Socket.resolve(sock)
        guard let info = socket.tlsInfo else { throw SocketError(.badConfig, "the connection is not secure") }
        var result = sk_tls_info_t()
        copy(info.protocolVersion, into: &result.protocol_version)
        copy(info.cipher, into: &result.cipher)
        copy(info.alpnProtocol ?? "", into: &result.alpn_protocol)
        copy(info.serverName ?? "", into: &result.server_name)
        result.session_reused = info.sessionReused ? 1 : 0
        result.peer_certificate_count = Int32(info.peerCertificates.count)
        outInfo?.pointee = result
        return 0
    } catch {
        return error.code.rawValue
    }
}

@_cdecl("sk_socket_copy_peer_certificate")
public func sk_socket_copy_peer_certificate(_ sock: OpaquePointer?, _ index: Int32, _ buffer: UnsafeMutableRawPointer?,
                                            _ inoutLength: UnsafeMutablePointer<Int>?) -> Int32 {
    do throws(SocketError) {
        let socket = try Socket.resolve(sock)
        guard let inoutLength else { throw badParam("inout_length is NULL") }
        guard let info = socket.tlsInfo else { throw SocketError(.badConfig, "the connection is not secure") }
        guard index >= 0, Int(index) < info.peerCertificates.count else { throw badParam("no certificate \(index)") }
        let der = info.peerCertificates[Int(index)].der
        let result = der.withUnsafeBytes { CBuffer.copy($0, into: buffer, capacity: inoutLength.pointee) }
        if result >= 0 { inoutLength.pointee = der.count }
        return result
    } catch {
        return error.code.rawValue
    }
}

@_cdecl("sk_socket_copy_ocsp_response")
public func sk_socket_copy_ocsp_response(_ sock: OpaquePointer?, _ buffer: UnsafeMutableRawPointer?,
                                         _ inoutLength: UnsafeMutablePointer<Int>?) -> Int32 {
    do throws(SocketError) {
        let socket = try Socket.resolve(sock)
        guard let inoutLength else { throw badParam("inout_length is NULL") }
        guard let info = socket.tlsInfo else { throw SocketError(.badConfig, "the connection is not secure") }
        let der = info.ocspResponse ?? []
        let result = der.withUnsafeBytes { CBuffer.copy($0, into: buffer, capacity: inoutLength.pointee) }
        if result >= 0 { inoutLength.pointee = der.count }
        return result
    } catch {
        return error.code.rawValue
    }
}

private func certificate(_ der: UnsafeRawPointer?, _ length: Int) throws(SocketError) -> Certificate {
    guard let der else { throw badParam("der is NULL") }
    let checked = try checkedLength(length, "length")
    guard checked > 0, checked <= 1 << 20 else { throw badParam("not a DER certificate") }
    return try Certificate(der: Array(UnsafeRawBufferPointer(start: der, count: checked)))
}

@_cdecl("sk_certificate_get_info")
public func sk_certificate_get_info(_ der: UnsafeRawPointer?, _ length: Int,
                                    _ outInfo: UnsafeMutablePointer<sk_certificate_info_t>?,
                                    _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        let parsed = try certificate(der, length)
        var info = sk_certificate_info_t()
        copy(parsed.subject, into: &info.subject)
        copy(parsed.issuer, into: &info.issuer)
        info.not_before = parsed.notBefore
        info.not_after = parsed.notAfter
        outInfo?.pointee = info
    }
}

@_cdecl("sk_certificate_to_pem")
public func sk_certificate_to_pem(_ der: UnsafeRawPointer?, _ length: Int, _ buffer: UnsafeMutablePointer<CChar>?,
                                  _ inoutLength: UnsafeMutablePointer<Int>?) -> Int32 {
    do throws(SocketError) {
        guard let inoutLength else { throw badParam("inout_length is NULL") }
        let pem = try certificate(der, length).pem
        let result = CBuffer.copy(text: pem, into: buffer, capacity: inoutLength.pointee)
        if result >= 0 { inoutLength.pointee = Int(result) + 1 }
        return result
    } catch {
        return error.code.rawValue
    }
}

// MARK: Trust for C

/// An `sk_tls_trust_t` and everything it points to, alive as long as this object.
final class CTrust {
    let trust: UnsafeMutablePointer<sk_tls_trust_t>
    private let certificates: UnsafeMutablePointer<sk_certificate_t>?
    private let chain: [[UInt8]]
    private let error: UnsafeMutablePointer<sk_error_t>?
    private let name: UnsafeMutablePointer<CChar>?

    init(_ source: TLSTrust, token: UInt64) {
        chain = source.chain.map(\.der)
        trust = .allocate(capacity: 1)
        if chain.isEmpty {
            certificates = nil
        } else {
            let made = UnsafeMutablePointer<sk_certificate_t>.allocate(capacity: chain.count)
            for (index, der) in chain.enumerated() {
                // The arrays are not changed while this object lives: their storage stays put.
                let base = der.withUnsafeBufferPointer { $0.baseAddress }
                made[index] = sk_certificate_t(der: base, der_length: der.count)
            }
            certificates = made
        }
        if let verification = source.verificationError {
            let made = UnsafeMutablePointer<sk_error_t>.allocate(capacity: 1)
            made.initialize(to: sk_error_t())
            fill(made, with: verification)
            error = made
        } else {
            error = nil
        }
        name = source.peerName.map { strdup($0) }
        trust.initialize(to: sk_tls_trust_t(token: token, chain: UnsafePointer(certificates), chain_count: chain.count,
                                            verification_error: UnsafePointer(error), peer_name: UnsafePointer(name)))
    }

    deinit {
        trust.deallocate()
        certificates?.deallocate()
        error?.deallocate()
        free(name)
    }
}
