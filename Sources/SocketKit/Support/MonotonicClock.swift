// SPDX-License-Identifier: MIT
import Glibc

/// Nanoseconds on the monotonic clock. Every deadline in the engine is one of these.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// Converts a duration in seconds (the unit of every timeout in the public API) to nanoseconds,
/// saturating instead of trapping: negative and NaN give 0, huge values about 292 years.
func nanoseconds(fromSeconds seconds: Double) -> UInt64 {
    guard seconds > 0 else { return 0 }
    guard seconds < 9.0e9 else { return 9_000_000_000 * 1_000_000_000 }
    return UInt64(seconds * 1e9)
}

/// A deadline `seconds` from now, saturating.
func deadline(afterSeconds seconds: Double, from now: UInt64 = monotonicNanoseconds()) -> UInt64 {
    let delta = nanoseconds(fromSeconds: seconds)
    let (sum, overflow) = now.addingReportingOverflow(delta)
    return overflow ? UInt64.max : sum
}
