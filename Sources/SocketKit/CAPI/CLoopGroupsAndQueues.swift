// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

extension EventLoopGroup: CHandleObject {
    static var handleKind: HandleRegistry.Kind { .loopGroup }
}

extension CallbackQueue: CHandleObject {
    static var handleKind: HandleRegistry.Kind { .callbackQueue }
}

// MARK: Event loop groups

@_cdecl("sk_loop_group_create")
public func sk_loop_group_create(_ loopCount: Int32, _ outGroup: UnsafeMutablePointer<OpaquePointer?>?,
                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outGroup else { throw badParam("out_group is NULL") }
        guard (1...1024).contains(loopCount) else { throw badParam("loop_count must be 1...1024") }
        let group = EventLoopGroup(loopCount: Int(loopCount))
        if let failure = group.loops.lazy.compactMap(\.startupError).first {
            try? group.shutdown()
            throw failure
        }
        outGroup.pointee = group.makeHandle()
    }
}

@_cdecl("sk_loop_group_create_driven")
public func sk_loop_group_create_driven(_ outGroup: UnsafeMutablePointer<OpaquePointer?>?,
                                        _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outGroup else { throw badParam("out_group is NULL") }
        let group = EventLoopGroup.driven()
        if let failure = group.loops[0].startupError { throw failure }
        outGroup.pointee = group.makeHandle()
    }
}

@_cdecl("sk_loop_group_get_fd")
public func sk_loop_group_get_fd(_ handle: OpaquePointer?) -> Int32 {
    guard let group = EventLoopGroup.lookup(handle) else { return SocketError.Code.invalidHandle.rawValue }
    guard group.isDriven else { return SocketError.Code.badConfig.rawValue }
    return group.backendDescriptor
}

@_cdecl("sk_thread_set_wait_hook")
public func sk_thread_set_wait_hook(_ hook: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
                                    _ context: UnsafeMutableRawPointer?) -> Int32 {
    EventLoopGroup.setWaitHookForCurrentThread(hook, context: context)
    return 0
}

@_cdecl("sk_loop_group_run_once")
public func sk_loop_group_run_once(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    var more = false
    let status = reporting(error) { () throws(SocketError) in
        // Once per iteration of the host's loop: the lookup inlined, not `resolve`'s call.
        guard let group = EventLoopGroup.lookup(handle) else { throw EventLoopGroup.invalidHandle }
        more = try group.runOnce()
        // Released while its stop could not finish at once (from another thread, or from a
        // callback): the handle lived on for this call; now that the loop has stopped, it goes.
        if !more && group.loops[0].hasStoppedDriven && group.releasePending.load(ordering: .acquiring) {
            _ = EventLoopGroup.removeHandle(handle)
        }
    }
    return status < 0 ? status : (more ? 1 : 0)
}

@_cdecl("sk_loop_group_loop_count")
public func sk_loop_group_loop_count(_ handle: OpaquePointer?) -> Int32 {
    guard handle != nil else { return Int32(EventLoopGroup.default.loops.count) }
    guard let group = EventLoopGroup.lookup(handle) else { return SocketError.Code.invalidHandle.rawValue }
    return Int32(group.loops.count)
}

@_cdecl("sk_loop_group_release")
public func sk_loop_group_release(_ handle: OpaquePointer?) -> Int32 {
    if let driven = EventLoopGroup.lookup(handle), driven.isDriven {
        // A driven loop stops on its host thread. Outside an iteration there, it stops now;
        // otherwise (another thread, a callback) the host's next sk_loop_group_run_once
        // finishes the stop, so the handle stays valid for that call and goes then.
        try? driven.shutdown()
        if driven.loops[0].hasStoppedDriven {
            _ = EventLoopGroup.removeHandle(handle)
        } else {
            driven.releasePending.store(true, ordering: .releasing)
        }
        return 0
    }
    guard let group = EventLoopGroup.removeHandle(handle) else { return SocketError.Code.invalidHandle.rawValue }
    if group.loops.contains(where: { $0.inEventLoop }) {
        // Joining our own thread would wait forever: finish the stop in the background.
        let sendable = CValue(group)
        do {
            try PosixThread.spawnDetached(name: "socketkit-stop") { try? sendable.value.shutdown() }
        } catch {
            for loop in group.loops { loop.requestStop() }
        }
    } else {
        try? group.shutdown()
    }
    return 0
}

func lookupGroup(_ handle: OpaquePointer?) throws(SocketError) -> EventLoopGroup? {
    guard handle != nil else { return nil }
    return try EventLoopGroup.resolve(handle)
}

// MARK: Callback queues

@_cdecl("sk_callback_queue_create_serial")
public func sk_callback_queue_create_serial(_ name: UnsafePointer<CChar>?, _ outQueue: UnsafeMutablePointer<OpaquePointer?>?,
                                            _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outQueue else { throw badParam("out_queue is NULL") }
        let queue = try SerialCallbackQueue(name: name.map { String(cString: $0) } ?? "socketkit-callbacks")
        outQueue.pointee = queue.makeHandle()
    }
}

@_cdecl("sk_callback_queue_create_host")
public func sk_callback_queue_create_host(_ outQueue: UnsafeMutablePointer<OpaquePointer?>?,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outQueue else { throw badParam("out_queue is NULL") }
        let queue = try HostCallbackQueue()
        outQueue.pointee = queue.makeHandle()
    }
}

@_cdecl("sk_callback_queue_fd")
public func sk_callback_queue_fd(_ handle: OpaquePointer?) -> Int32 {
    guard let queue = CallbackQueue.lookup(handle) else { return SocketError.Code.invalidHandle.rawValue }
    guard let host = queue as? HostCallbackQueue else { return SocketError.Code.badConfig.rawValue }
    return host.fileDescriptor
}

@_cdecl("sk_callback_queue_drain")
public func sk_callback_queue_drain(_ handle: OpaquePointer?, _ maxCallbacks: Int32) -> Int32 {
    guard let queue = CallbackQueue.lookup(handle) else { return SocketError.Code.invalidHandle.rawValue }
    guard let host = queue as? HostCallbackQueue else { return SocketError.Code.badConfig.rawValue }
    let ran = host.drain(maxCallbacks: maxCallbacks > 0 ? Int(maxCallbacks) : Int.max)
    return Int32(clamping: ran)
}

@_cdecl("sk_callback_queue_release")
public func sk_callback_queue_release(_ handle: OpaquePointer?) -> Int32 {
    CallbackQueue.removeHandle(handle) == nil ? SocketError.Code.invalidHandle.rawValue : 0
}

func lookupQueue(_ handle: OpaquePointer?) throws(SocketError) -> CallbackQueue {
    guard handle != nil else { return .eventLoop }
    return try CallbackQueue.resolve(handle)
}
