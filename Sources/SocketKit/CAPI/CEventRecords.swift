import Glibc
import SocketKitC

// sk_callback_queue_poll_events: a host-driven queue hands its pending events over as
// `sk_event_t` records instead of running C callbacks, so that a host whose callbacks are
// expensive (Python through ctypes) handles a whole batch after one foreign call.
//
// The poll drains the queue as `sk_callback_queue_drain` does, with a sink installed for
// the calling thread: `CDelegateReceiver` sees it and records the event instead of calling
// the member. The sink keeps what the records point to (read bytes, host strings, errors)
// until the queue's next poll.

/// The records of one poll, and the memory they point to.
final class CEventSink {
    unowned let queue: HostCallbackQueue
    private(set) var records: UnsafeMutablePointer<sk_event_t>? = nil
    private var capacity = 0
    private(set) var count = 0
    /// Read bytes and host strings of the current batch (their storage is what records
    /// point to; an array's buffer does not move while the array lives unmodified).
    private var keptBytes: [[UInt8]] = []
    private var keptStrings: [[CChar]] = []
    private var keptTrusts: [CTrust] = []
    private var errors: UnsafeMutablePointer<sk_error_t>
    private var errorCapacity: Int
    private var errorCount = 0

    init(queue: HostCallbackQueue) {
        self.queue = queue
        errorCapacity = 16
        errors = .allocate(capacity: errorCapacity)
    }

    deinit { errors.deallocate() }

    /// Starts a batch into `records` (the previous batch's memory is given up).
    func begin(into records: UnsafeMutablePointer<sk_event_t>, capacity: Int) {
        keptBytes.removeAll(keepingCapacity: true)
        keptStrings.removeAll(keepingCapacity: true)
        keptTrusts.removeAll(keepingCapacity: true)
        errorCount = 0
        if errorCapacity < capacity {
            // Error records keep pointers into this storage: grow it only between batches.
            errors.deallocate()
            errorCapacity = capacity
            errors = .allocate(capacity: errorCapacity)
        }
        self.records = records
        self.capacity = capacity
        count = 0
    }

    func end() {
        records = nil
        capacity = 0
    }

    var isFull: Bool { count >= capacity }

    func append(_ record: sk_event_t) {
        // The drain's budget is the capacity and every event makes at most one record.
        precondition(count < capacity, "more records than the poll's capacity")
        records![count] = record
        count += 1
    }

    func keep(_ bytes: [UInt8]) -> UnsafeRawPointer? {
        keptBytes.append(bytes)
        return keptBytes[keptBytes.count - 1].withUnsafeBytes { $0.baseAddress }
    }

    func keep(_ text: String) -> UnsafePointer<CChar> {
        keptStrings.append(Array(text.utf8CString))
        return keptStrings[keptStrings.count - 1].withUnsafeBufferPointer { $0.baseAddress! }
    }

    func keep(_ trust: CTrust) -> CTrust {
        keptTrusts.append(trust)
        return trust
    }

    func keep(_ error: SocketError) -> UnsafePointer<sk_error_t> {
        precondition(errorCount < errorCapacity)
        let slot = errors + errorCount
        slot.initialize(to: sk_error_t())
        fill(&slot.pointee, with: error)
        errorCount += 1
        return UnsafePointer(slot)
    }

    /// The sink of the poll running on this thread, if any (a C thread-local: read per event).
    static var current: CEventSink? {
        guard let raw = skc_event_sink_current() else { return nil }
        return Unmanaged<CEventSink>.fromOpaque(raw).takeUnretainedValue()
    }

    static func setCurrent(_ sink: CEventSink?) {
        skc_event_sink_set(sink.map { Unmanaged.passUnretained($0).toOpaque() })
    }
}

extension CDelegateReceiver {
    /// The sink to record `socket`'s events into: a poll of the socket's queue is running
    /// on this thread.
    func sink(for socket: Socket) -> CEventSink? {
        guard let sink = CEventSink.current, socket.callbackQueue === sink.queue else { return nil }
        return sink
    }

    /// Records `event` (a member that is NULL: nothing, as a call would do nothing).
    /// Returns `.nan` for a recorded timeout: its answer comes with sk_socket_answer_timeout.
    func record(_ event: SocketEvent, on socket: Socket, handle: OpaquePointer?, into sink: CEventSink) -> Double {
        var record = sk_event_t()
        record.sock = handle
        record.userdata = userdata
        var answerLater = false
        switch event {
        case .didConnect(let peer):
            guard delegate.did_connect != nil else { return 0 }
            record.kind = Int32(SK_EVENT_CONNECT.rawValue)
            record.host = sink.keep(peer.family == .unix ? (peer.unixPath ?? "") : (peer.host ?? ""))
            record.port = peer.port
        case .didAccept:
            return 0
        case .didAcceptSocket(let child):
            let childHandle = HandleRegistry.shared.register(child, kind: .socket)
            child.cHandle.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(childHandle))), ordering: .relaxed)
            guard delegate.did_accept != nil else {
                // Nobody takes it: as upstream, an unowned accepted socket closes.
                _ = HandleRegistry.shared.remove(childHandle, .socket)
                return 0
            }
            record.kind = Int32(SK_EVENT_ACCEPT.rawValue)
            record.new_socket = childHandle
        case .didNotAccept(let error):
            guard delegate.did_pause_accepting != nil else { return 0 }
            record.kind = Int32(SK_EVENT_PAUSE_ACCEPTING.rawValue)
            record.error = sink.keep(error)
        case .didRead(let payload, let tag):
            guard delegate.did_read != nil else { return 0 }
            record.kind = Int32(SK_EVENT_READ.rawValue)
            record.tag = tag
            switch payload {
            case .borrowed(let bytes):
                record.data = sink.keep(Array(bytes))
                record.length = bytes.count
            case .owned(let bytes):
                record.data = sink.keep(bytes)
                record.length = bytes.count
            case .callerBuffer(let buffer, let range):
                record.data = UnsafeRawPointer(buffer.baseAddress.map { $0 + range.lowerBound })
                record.length = range.count
            }
        case .didReadPartial(let length, let tag):
            guard delegate.did_read_partial != nil else { return 0 }
            record.kind = Int32(SK_EVENT_READ_PARTIAL.rawValue)
            record.length = length
            record.tag = tag
        case .shouldTimeoutRead(let tag, let elapsed, let bytesDone, let question):
            guard delegate.should_timeout_read != nil else { return 0 }
            record.kind = Int32(SK_EVENT_READ_TIMEOUT.rawValue)
            record.tag = tag
            record.elapsed = elapsed
            record.length = bytesDone
            record.token = question
            answerLater = true
        case .didWrite(let tag):
            guard delegate.did_write != nil else { return 0 }
            record.kind = Int32(SK_EVENT_WRITE.rawValue)
            record.tag = tag
        case .didWritePartial(let length, let tag):
            guard delegate.did_write_partial != nil else { return 0 }
            record.kind = Int32(SK_EVENT_WRITE_PARTIAL.rawValue)
            record.length = length
            record.tag = tag
        case .shouldTimeoutWrite(let tag, let elapsed, let bytesDone, let question):
            guard delegate.should_timeout_write != nil else { return 0 }
            record.kind = Int32(SK_EVENT_WRITE_TIMEOUT.rawValue)
            record.tag = tag
            record.elapsed = elapsed
            record.length = bytesDone
            record.token = question
            answerLater = true
        case .didSecure:
            guard delegate.did_secure != nil else { return 0 }
            record.kind = Int32(SK_EVENT_SECURE.rawValue)
        case .didReceiveTrust(let trust, let question):
            guard delegate.did_receive_trust != nil else {
                socket.answerTrust(question: question, accept: false)
                return 0
            }
            record.kind = Int32(SK_EVENT_TRUST.rawValue)
            record.token = question
            record.trust = UnsafePointer(sink.keep(CTrust(trust, token: question)).trust)
        case .didCloseReadStream:
            guard delegate.did_close_read_stream != nil else { return 0 }
            record.kind = Int32(SK_EVENT_CLOSE_READ_STREAM.rawValue)
        case .didReachWriteHighWatermark(let queued):
            guard delegate.did_reach_high_watermark != nil else { return 0 }
            record.kind = Int32(SK_EVENT_HIGH_WATERMARK.rawValue)
            record.length = queued
        case .didDrainToWriteLowWatermark(let queued):
            guard delegate.did_drain_to_low_watermark != nil else { return 0 }
            record.kind = Int32(SK_EVENT_LOW_WATERMARK.rawValue)
            record.length = queued
        case .didDisconnect(let error):
            guard delegate.did_disconnect != nil else { return 0 }
            record.kind = Int32(SK_EVENT_DISCONNECT.rawValue)
            record.error = error.map { sink.keep($0) }
        }
        sink.append(record)
        return answerLater ? .nan : 0
    }
}

@_cdecl("sk_callback_queue_poll_events")
public func sk_callback_queue_poll_events(_ handle: OpaquePointer?, _ events: UnsafeMutablePointer<sk_event_t>?,
                                          _ capacity: Int32) -> Int32 {
    guard let queue = HandleRegistry.shared.lookup(handle, .callbackQueue, as: CallbackQueue.self) else {
        return SocketError.Code.invalidHandle.rawValue
    }
    guard let host = queue as? HostCallbackQueue else { return SocketError.Code.badConfig.rawValue }
    guard let events, capacity >= 1 else { return SocketError.Code.badParam.rawValue }
    // Nothing pending (the common answer when a host polls after every turn of its loop):
    // one lock instead of claiming the queue and setting up the sink (~830 -> ~200
    // instructions, callgrind). The descriptor is not readable then either, so the host is
    // not woken for events this misses: one queued now makes it readable.
    guard host.hasPendingCallbacks else { return 0 }
    let recorded = host.exclusively { () -> Int in
        let sink: CEventSink
        if let existing = host.drainAttachment as? CEventSink {
            sink = existing
        } else {
            sink = CEventSink(queue: host)
            host.drainAttachment = sink
        }
        sink.begin(into: events, capacity: Int(capacity))
        let outer = CEventSink.current
        CEventSink.setCurrent(sink)
        _ = host.runCallbacks(maxCallbacks: Int(capacity))
        CEventSink.setCurrent(outer)
        sink.end()
        return sink.count
    }
    return Int32(clamping: recorded ?? 0)
}

@_cdecl("sk_socket_answer_timeout")
public func sk_socket_answer_timeout(_ event: UnsafePointer<sk_event_t>?, _ extension: Double) -> Int32 {
    guard let event else { return SocketError.Code.badParam.rawValue }
    let record = event.pointee
    let read: Bool
    switch record.kind {
    case Int32(SK_EVENT_READ_TIMEOUT.rawValue): read = true
    case Int32(SK_EVENT_WRITE_TIMEOUT.rawValue): read = false
    default: return SocketError.Code.badParam.rawValue
    }
    guard let socket = try? lookupSocket(record.sock) else { return SocketError.Code.invalidHandle.rawValue }
    socket.answerTimeout(ofRead: read, question: record.token, extension: `extension`)
    return 0
}
