// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

// sk_callback_queue_poll_events: a host-driven queue hands its pending events over as
// `sk_event_t` records instead of running C callbacks, so that a host whose callbacks are
// expensive (Python through ctypes) handles a whole batch after one foreign call.
//
// The poll drains the queue as `sk_callback_queue_drain` does, with a sink installed for
// the calling thread: a C receiver sees it (`CSocketObject.deliverToC`) and records the
// event instead of calling the member. The sink keeps what the records point to (read bytes, host strings, errors)
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

@_cdecl("sk_callback_queue_poll_events")
public func sk_callback_queue_poll_events(_ handle: OpaquePointer?, _ events: UnsafeMutablePointer<sk_event_t>?,
                                          _ capacity: Int32) -> Int32 {
    guard let queue = CallbackQueue.lookup(handle) else { return SocketError.Code.invalidHandle.rawValue }
    guard let host = queue as? HostCallbackQueue else { return SocketError.Code.badConfig.rawValue }
    guard let events, capacity >= 1 else { return SocketError.Code.badParam.rawValue }
    // Nothing pending (the common answer when a host polls after every turn of its loop):
    // one lock instead of claiming the queue and setting up the sink. The descriptor is not
    // readable then either, so the host is not woken for events this misses: one queued now
    // makes it readable.
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
    return Socket.answer(record.sock) { socket in
        socket.answerTimeout(ofRead: read, question: record.token, extension: `extension`)
        return 0
    }
}
