// SPDX-License-Identifier: MIT
import SocketKitC

// The C face of the engine's log (Logging/Log.swift): a function pointer and its userdata
// become the one handler.

/// The C callback and its userdata, as the handler holds them.
private struct CLogCallback: @unchecked Sendable {
    let function: sk_log_callback_t
    let userdata: UnsafeMutableRawPointer?
}

@_cdecl("sk_log_set_callback")
public func sk_log_set_callback(_ callback: sk_log_callback_t?, _ level: Int32,
                                _ userdata: UnsafeMutableRawPointer?) -> Int32 {
    // SK_LOG_OFF (0) to SK_LOG_DEBUG: LogLevel's raw values are the C levels.
    guard level >= 0, level <= Int32(LogLevel.debug.rawValue) else {
        return SocketError.Code.badParam.rawValue
    }
    guard let callback, let level = LogLevel(rawValue: Int(level)) else {
        SocketKitLog.removeHandler()
        return 0
    }
    let target = CLogCallback(function: callback, userdata: userdata)
    SocketKitLog.setHandler(level: level) { record in
        record.subsystem.rawValue.withCString { subsystem in
            record.message.withCString { message in
                target.function(Int32(record.level.rawValue), subsystem, message, target.userdata)
            }
        }
    }
    return 0
}
