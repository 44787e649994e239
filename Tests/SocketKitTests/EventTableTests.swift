// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Testing
@testable import SocketKit

/// The engine's events against the event table of docs/EVENTS_AND_ERRORS.md (its other
/// faces are checked by Tests/check_tables.py): every `SocketEvent` and `UdpSocketEvent`
/// case reaches the C delegate member its row names when called, and becomes a record of
/// its row's kind carrying exactly its row's fields when polled.
@Suite("The event table")
struct EventTableTests {
    /// One row of the table's "Events" section.
    struct Row {
        let kind: Int32?
        let socket: String
        let member: String
        let swift: String
        let fields: Set<String>
    }

    static func rows() throws -> [Row] {
        let top = String(#filePath).split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
        let path = top + "/docs/EVENTS_AND_ERRORS.md"
        guard let file = fopen(path, "r") else { throw SocketError.systemError(errno, "fopen \(path)") }
        defer { fclose(file) }
        var rows: [Row] = []
        var inEvents = false
        var header: [String]? = nil
        var line: UnsafeMutablePointer<CChar>? = nil
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let text = String(cString: line).trimmingWhitespace
            if text.hasPrefix("## ") {
                inEvents = text == "## Events"
                continue
            }
            guard inEvents, text.hasPrefix("|") else { continue }
            let cells = text.dropFirst().dropLast().split(separator: "|", omittingEmptySubsequences: false)
                .map { String($0).trimmingWhitespace }
            guard let columns = header else {
                header = cells
                continue
            }
            guard !cells.allSatisfy({ $0.allSatisfy { "-: ".contains($0) } }) else { continue }
            let cell = { (name: String) -> String in cells[columns.firstIndex(of: name)!] }
            rows.append(Row(kind: Int32(cell("Kind")), socket: cell("Socket"), member: cell("C member"),
                            swift: cell("Swift"),
                            fields: cell("Fields") == "—" ? [] : Set(cell("Fields").split(separator: ",").map {
                                String($0).trimmingWhitespace
                            })))
        }
        return rows
    }

    /// The case name of an event (its label in Swift).
    static func caseName(_ event: Any) -> String {
        Mirror(reflecting: event).children.first?.label ?? "\(event)"
    }

    /// The fields of a record that are set (the socket, userdata and kind aside).
    static func setFields(_ record: sk_event_t) -> Set<String> {
        var set: Set<String> = []
        for child in Mirror(reflecting: record).children {
            guard let label = child.label, !["sock", "udp_sock", "userdata", "kind"].contains(label) else { continue }
            let text = "\(child.value)"
            if !["nil", "0", "0.0"].contains(text) { set.insert(label) }
        }
        return set
    }

    // MARK: TCP

    /// Fails to compile when `SocketEvent` gains a case: give it a sample in `socketSamples`
    /// and a row in the table.
    static func tripwire(_ event: SocketEvent) {
        switch event {
        case .didConnect, .didAccept, .didAcceptSocket, .didNotAccept, .didRead, .didReadPartial, .shouldTimeoutRead,
             .didWrite, .didWritePartial, .shouldTimeoutWrite, .didCloseReadStream, .didSecure, .didReceiveTrust,
             .didReachWriteHighWatermark, .didDrainToWriteLowWatermark, .didDisconnect, .didCancelRead:
            break
        }
    }

    /// One event of each case, every value non-zero.
    static func socketSamples(child: Socket, core: TCPSocketCore) throws -> [SocketEvent] {
        let error = SocketError(.closed, "sample")
        let trust = TLSTrust(chain: [], verificationError: nil, peerName: "peer")
        return [
            .didConnect(peer: try SocketAddress(ipAddress: "192.0.2.1", port: 7)), .didAccept(core), .didAcceptSocket(child),
            .didNotAccept(error), .didRead(.owned([1, 2, 3]), tag: 5), .didReadPartial(length: 2, tag: 5),
            .shouldTimeoutRead(tag: 5, elapsed: 1.5, bytesDone: 2, question: 9), .didWrite(tag: 5),
            .didWritePartial(length: 2, tag: 5), .shouldTimeoutWrite(tag: 5, elapsed: 1.5, bytesDone: 2, question: 9),
            .didCloseReadStream, .didSecure, .didReceiveTrust(trust, question: 9), .didReachWriteHighWatermark(queuedBytes: 2),
            .didDrainToWriteLowWatermark(queuedBytes: 2), .didDisconnect(error), .didCancelRead(tag: 5, unreadBytes: 2),
        ]
    }

    /// Members that say which of them was called (through the userdata: a `CalledMembers`).
    static func tcpDelegate() -> sk_socket_delegate_t {
        var delegate = sk_socket_delegate_t()
        delegate.did_accept = { _, child, userdata in
            CalledMembers.note("did_accept", userdata)
            _ = sk_socket_release(child)
        }
        delegate.new_socket_loop_for_connection = { _, _, _, userdata in
            CalledMembers.note("new_socket_loop_for_connection", userdata)
            return -1
        }
        delegate.did_pause_accepting = { _, _, userdata in CalledMembers.note("did_pause_accepting", userdata) }
        delegate.did_connect = { _, _, _, userdata in CalledMembers.note("did_connect", userdata) }
        delegate.did_read = { _, _, _, _, userdata in CalledMembers.note("did_read", userdata) }
        delegate.did_read_partial = { _, _, _, userdata in CalledMembers.note("did_read_partial", userdata) }
        delegate.should_timeout_read = { _, _, _, _, userdata in
            CalledMembers.note("should_timeout_read", userdata)
            return 0
        }
        delegate.did_write = { _, _, userdata in CalledMembers.note("did_write", userdata) }
        delegate.did_write_partial = { _, _, _, userdata in CalledMembers.note("did_write_partial", userdata) }
        delegate.should_timeout_write = { _, _, _, _, userdata in
            CalledMembers.note("should_timeout_write", userdata)
            return 0
        }
        delegate.did_close_read_stream = { _, userdata in CalledMembers.note("did_close_read_stream", userdata) }
        delegate.did_reach_high_watermark = { _, _, userdata in CalledMembers.note("did_reach_high_watermark", userdata) }
        delegate.did_drain_to_low_watermark = { _, _, userdata in CalledMembers.note("did_drain_to_low_watermark", userdata) }
        delegate.did_disconnect = { _, _, userdata in CalledMembers.note("did_disconnect", userdata) }
        delegate.did_secure = { _, userdata in CalledMembers.note("did_secure", userdata) }
        delegate.did_receive_trust = { _, _, userdata in CalledMembers.note("did_receive_trust", userdata) }
        delegate.did_cancel_read = { _, _, _, userdata in CalledMembers.note("did_cancel_read", userdata) }
        return delegate
    }

    @Test func everySocketEventReachesItsMemberAndItsRecord() throws {
        let rows = try Self.rows().filter { $0.socket == "TCP" && $0.swift != "—" }
        let called = CalledMembers()
        var delegate = Self.tcpDelegate()
        let receiver = try #require(try CSocketDelegateReceiver.make(&delegate, size: MemoryLayout<sk_socket_delegate_t>.size,
                                                                      userdata: called.userdata))
        let queue = try HostCallbackQueue()
        let socket = Socket(receiver: receiver, callbackQueue: queue, eventLoop: nil)
        let child = Socket(receiver: receiver, callbackQueue: queue, eventLoop: nil)
        let samples = try Self.socketSamples(child: child, core: Socket(receiver: nil, callbackQueue: .eventLoop, eventLoop: nil).core)
        #expect(Set(samples.map(Self.caseName)) == Set(rows.map(\.swift) + ["didAccept"]),
                "SocketEvent's cases and the table's TCP events (the engine's didAccept is never delivered)")

        let sink = CEventSink(queue: queue)
        let records = UnsafeMutablePointer<sk_event_t>.allocate(capacity: 1)
        defer { records.deallocate() }
        for event in samples {
            let name = Self.caseName(event)
            let row = rows.first { $0.swift == name }
            called.names.removeAll()
            _ = receiver.receive(event, on: socket)
            #expect(called.names == (row.map { [$0.member] } ?? []), "the call for \(name)")

            sink.begin(into: records, capacity: 1)
            CEventSink.setCurrent(sink)
            _ = receiver.receive(event, on: socket)
            CEventSink.setCurrent(nil)
            sink.end()
            guard let row else {
                #expect(sink.count == 0, "\(name) makes no record")
                continue
            }
            try #require(sink.count == 1, "\(name) makes one record")
            #expect(records[0].kind == row.kind, "the kind of \(name)'s record")
            #expect(Self.setFields(records[0]) == row.fields, "the fields of \(name)'s record")
            #expect(records[0].userdata == called.userdata)
            if let accepted = records[0].new_socket { _ = sk_socket_release(accepted) }
        }
    }

    // MARK: UDP

    /// Fails to compile when `UdpSocketEvent` gains a case: give it a sample in
    /// `udpSamples` and a row in the table.
    static func tripwire(_ event: UdpSocketEvent) {
        switch event {
        case .didConnect, .didNotConnect, .didSend, .didNotSend, .didReceive, .didReceiveWithPacketInfo, .didReceiveError,
             .didClose:
            break
        }
    }

    static func udpSamples() throws -> [UdpSocketEvent] {
        let address = try SocketAddress(ipAddress: "192.0.2.1", port: 7)
        let error = SocketError(.sendTimeout, "sample")
        let context = CFilterContext(pointer: UnsafeMutableRawPointer(bitPattern: 0x40))
        return [
            .didConnect(address), .didNotConnect(error), .didSend(tag: 5), .didNotSend(tag: 5, error),
            .didReceive(.owned([1, 2, 3]), from: address, context: context), .didReceiveError(error), .didClose(error),
            .didReceiveWithPacketInfo(.owned([1, 2, 3]), from: address, context: context,
                                      info: UdpPacketInfo(destination: try SocketAddress(ipAddress: "232.1.2.3", port: 0),
                                                          interfaceIndex: 1)),
        ]
    }

    static func udpDelegate() -> sk_udp_socket_delegate_t {
        var delegate = sk_udp_socket_delegate_t()
        delegate.did_connect = { _, _, _, userdata in CalledMembers.note("did_connect", userdata) }
        delegate.did_not_connect = { _, _, userdata in CalledMembers.note("did_not_connect", userdata) }
        delegate.did_send = { _, _, userdata in CalledMembers.note("did_send", userdata) }
        delegate.did_not_send = { _, _, _, userdata in CalledMembers.note("did_not_send", userdata) }
        delegate.did_receive = { _, _, _, _, _, _, userdata in CalledMembers.note("did_receive", userdata) }
        delegate.did_receive_error = { _, _, userdata in CalledMembers.note("did_receive_error", userdata) }
        delegate.did_close = { _, _, userdata in CalledMembers.note("did_close", userdata) }
        delegate.did_receive_with_packet_info = { _, _, _, _, _, _, _, userdata in
            CalledMembers.note("did_receive_with_packet_info", userdata)
        }
        return delegate
    }

    @Test func everyUdpSocketEventReachesItsMemberAndItsRecord() throws {
        let rows = try Self.rows().filter { $0.socket == "UDP" }
        let called = CalledMembers()
        var delegate = Self.udpDelegate()
        let receiver = try #require(try CUdpSocketDelegateReceiver.make(&delegate, size: MemoryLayout<sk_udp_socket_delegate_t>.size,
                                                                         userdata: called.userdata))
        let queue = try HostCallbackQueue()
        let socket = UdpSocket(receiver: receiver, callbackQueue: queue, eventLoop: nil)
        let samples = try Self.udpSamples()
        #expect(Set(samples.map(Self.caseName)) == Set(rows.map(\.swift)), "UdpSocketEvent's cases and the table's UDP events")

        let sink = CEventSink(queue: queue)
        let records = UnsafeMutablePointer<sk_event_t>.allocate(capacity: 1)
        defer { records.deallocate() }
        for event in samples {
            let name = Self.caseName(event)
            let row = try #require(rows.first { $0.swift == name })
            called.names.removeAll()
            receiver.receive(event, on: socket)
            #expect(called.names == [row.member], "the call for \(name)")

            sink.begin(into: records, capacity: 1)
            CEventSink.setCurrent(sink)
            receiver.receive(event, on: socket)
            CEventSink.setCurrent(nil)
            sink.end()
            try #require(sink.count == 1, "\(name) makes one record")
            #expect(records[0].kind == row.kind, "the kind of \(name)'s record")
            #expect(Self.setFields(records[0]) == row.fields, "the fields of \(name)'s record")
        }
    }
}

/// What the test delegates' members note: the names of the members called, in order.
final class CalledMembers {
    var names: [String] = []
    var userdata: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    static func note(_ member: String, _ userdata: UnsafeMutableRawPointer?) {
        Unmanaged<CalledMembers>.fromOpaque(userdata!).takeUnretainedValue().names.append(member)
    }
}

private extension String {
    var trimmingWhitespace: String {
        var text = Substring(self)
        while let first = text.first, first.isWhitespace { text.removeFirst() }
        while let last = text.last, last.isWhitespace { text.removeLast() }
        return String(text)
    }
}
