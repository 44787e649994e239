// SPDX-License-Identifier: MIT
import Glibc
import Synchronization

/// Host name resolution, off the event loops: `getaddrinfo` blocks, so a small pool of
/// threads (started on demand, at most four) runs it and hands the result back.
/// A request can be cancelled: if it has not started it never runs; if it has, its result is
/// dropped.
final class AddressResolver: @unchecked Sendable {
    static let shared = AddressResolver(maximumThreads: 4)

    final class Request: @unchecked Sendable {
        let host: String
        let port: UInt16
        /// One family's addresses only (Happy Eyeballs v2 asks for A and AAAA apart), or both.
        let family: SocketAddress.Family?
        fileprivate let completion: @Sendable (Result<[SocketAddress], SocketError>) -> Void
        fileprivate let cancelled = Atomic<Bool>(false)

        fileprivate init(host: String, port: UInt16, family: SocketAddress.Family?,
                         completion: @escaping @Sendable (Result<[SocketAddress], SocketError>) -> Void) {
            self.host = host
            self.port = port
            self.family = family
            self.completion = completion
        }

        func cancel() { cancelled.store(true, ordering: .relaxed) }
        var isCancelled: Bool { cancelled.load(ordering: .relaxed) }
    }

    /// Host names whose lookups tests answer themselves (`@testable` tests only: there is no
    /// public way in): the pool thread calls the stub instead of `getaddrinfo`, so a test can
    /// hold an answer back, or give one no resolver here would. Names no test registered
    /// cost a dictionary lookup.
    static let testStubs = LockedValue<[String: @Sendable (UInt16) -> Result<[SocketAddress], SocketError>]>([:])

    /// As `testStubs`, asked for one family at a time (a request for one family finds the
    /// name here first; `testStubs`' answer is otherwise filtered to that family), so a test
    /// can answer A and AAAA separately, each when it likes.
    static let familyTestStubs =
        LockedValue<[String: @Sendable (UInt16, SocketAddress.Family) -> Result<[SocketAddress], SocketError>]>([:])

    private let maximumThreads: Int
    private let lock = ConditionLock()
    private var waiting: [Request] = []
    private var threadCount = 0
    private var idleThreads = 0

    init(maximumThreads: Int) {
        self.maximumThreads = maximumThreads
    }

    /// Resolves `host` (`family`'s addresses only, when given) on a pool thread; `completion`
    /// runs on that thread unless cancelled.
    @discardableResult
    func resolve(host: String, port: UInt16, family: SocketAddress.Family? = nil,
                 completion: @escaping @Sendable (Result<[SocketAddress], SocketError>) -> Void) -> Request {
        let request = Request(host: host, port: port, family: family, completion: completion)
        var startThread = false
        lock.withLock {
            waiting.append(request)
            if idleThreads > 0 {
                lock.signal()
            } else if threadCount < maximumThreads {
                threadCount += 1
                startThread = true
            }
        }
        if startThread {
            do {
                try PosixThread.spawnDetached(name: "socketkit-resolver") { [self] in work() }
            } catch {
                EngineLog.log(.error, .resolver, "no resolver thread could start (\(error.message)): "
                    + "the names waiting for one fail")
                let orphaned = lock.withLock { () -> [Request] in
                    threadCount -= 1
                    guard threadCount == 0 else { return [] }
                    defer { waiting.removeAll() }
                    return waiting
                }
                for waiter in orphaned where !waiter.isCancelled { waiter.completion(.failure(error)) }
            }
        }
        return request
    }

    private func work() {
        while true {
            lock.lock()
            while waiting.isEmpty {
                idleThreads += 1
                lock.wait()
                idleThreads -= 1
            }
            let request = waiting.removeFirst()
            lock.unlock()
            guard !request.isCancelled else { continue }
            let result = AddressResolver.answer(request)
            guard !request.isCancelled else { continue }
            request.completion(result)
        }
    }

    /// A request's answer: from a test's stub, else from `getaddrinfo`. A request for one
    /// family is not logged when it fails (its connect logs once, when every family failed).
    private static func answer(_ request: Request) -> Result<[SocketAddress], SocketError> {
        guard let family = request.family else {
            let stub = testStubs.withLock { $0[request.host] }
            return stub?(request.port) ?? lookup(host: request.host, port: request.port)
        }
        if let stub = familyTestStubs.withLock({ $0[request.host] }) { return stub(request.port, family) }
        if let stub = testStubs.withLock({ $0[request.host] }) {
            return stub(request.port).flatMap { (addresses) -> Result<[SocketAddress], SocketError> in
                let found = addresses.filter { $0.family == family }
                return found.isEmpty
                    ? .failure(SocketError(.resolution, osError: EAI_NONAME, "\(request.host): no \(family) address"))
                    : .success(found)
            }
        }
        return resolve(host: request.host, port: request.port, family: family)
    }

    /// A host as the public calls take it (a name or an IP literal): `.badParam` when empty,
    /// or when it holds a NUL (`getaddrinfo` and `inet_pton` would resolve the text before it).
    static func checkHost(_ host: String) throws(SocketError) {
        guard !host.isEmpty else { throw SocketError(.badParam, "empty host") }
        try host.checkedForC("the host")
    }

    /// Blocking resolution (a name that does not resolve is logged, `info`):
    /// `"localhost"`/`"loopback"` give 127.0.0.1 and ::1 without asking
    /// the resolver, IP literals give themselves, names under `.invalid` fail at once
    /// (`isReservedInvalid`), anything else goes to `getaddrinfo`
    /// (IPv4 and IPv6, in the resolver's order, duplicates removed).
    static func lookup(host: String, port: UInt16) -> Result<[SocketAddress], SocketError> {
        let result = resolve(host: host, port: port)
        if case .failure(let error) = result, error.code != .badParam {
            EngineLog.log(.info, .resolver, "\"\(host)\" did not resolve: \(error)")
        }
        return result
    }

    /// `invalid.` and the names under it, which RFC 6761 (6.4) reserves so that they never
    /// resolve and says resolver libraries should answer at once. `getaddrinfo` asks the
    /// nameserver all the same: without one it answers only once its retries have timed
    /// out, with EAI_AGAIN ("try again") rather than "no such name".
    static func isReservedInvalid(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return name == "invalid" || name.hasSuffix(".invalid")
    }

    private static func resolve(host: String, port: UInt16,
                                family: SocketAddress.Family? = nil) -> Result<[SocketAddress], SocketError> {
        do throws(SocketError) { try checkHost(host) } catch { return .failure(error) }
        if isReservedInvalid(host) {
            return .failure(SocketError(.resolution, osError: EAI_NONAME,
                                        "\(host): a name under .invalid never resolves (RFC 6761)"))
        }
        var known: [SocketAddress]? = nil
        if host == "localhost" || host == "loopback" {
            known = [.ipv4Loopback(port: port), .ipv6Loopback(port: port)]
        } else if let literal = SocketAddress.parseIPLiteral(host, port: port) {
            known = [literal]
        }
        if let known {
            let found = known.filter { family == nil || $0.family == family }
            return found.isEmpty
                ? .failure(SocketError(.resolution, osError: EAI_NONAME, "\(host): no \(family.map { "\($0)" } ?? "") address"))
                : .success(found)
        }
        var hints = addrinfo()
        switch family {
        case .ipv4: hints.ai_family = AF_INET
        case .ipv6: hints.ai_family = AF_INET6
        case .unix, nil: hints.ai_family = AF_UNSPEC
        }
        hints.ai_socktype = SystemCalls.streamType
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0 else {
            let systemErrno = errno
            if status == EAI_SYSTEM {
                return .failure(SocketError.systemError(systemErrno, "getaddrinfo(\(host))"))
            }
            return .failure(SocketError(.resolution, osError: status,
                                        "\(host): \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ai_next }
            guard let raw = entry.pointee.ai_addr,
                  let address = SocketAddress(storage: raw, length: entry.pointee.ai_addrlen),
                  address.family != .unix else { continue }
            let withPort = address.withPort(port)
            if !addresses.contains(withPort) { addresses.append(withPort) }
        }
        guard !addresses.isEmpty else {
            return .failure(SocketError(.resolution, osError: EAI_FAIL, "\(host): no usable address"))
        }
        return .success(addresses)
    }
}
