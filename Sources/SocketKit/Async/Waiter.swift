// SPDX-License-Identifier: MIT
/// A task waiting for the loop: the continuation a bridge keeps and resumes from a callback.
///
/// Release builds use `UnsafeContinuation`: its layout is fixed (frozen), so the bridges'
/// state enums that hold one are copied and switched over inline. `CheckedContinuation` is
/// resilient: every state change then went through the runtime's generic enum witnesses
/// (about a tenth of an async echo's instructions per round trip, bench/README.md). Debug
/// builds, which the tests run, keep `CheckedContinuation`, whose checks (resumed twice,
/// never resumed) stop a broken state machine at once.
#if DEBUG
typealias Waiter<Value> = CheckedContinuation<Value, any Error>
typealias EndWaiter = CheckedContinuation<Void, Never>

@inline(__always)
nonisolated(nonsending) func suspend<Value>(_ body: (Waiter<Value>) -> Void) async throws -> Value {
    try await withCheckedThrowingContinuation(body)
}

@inline(__always)
nonisolated(nonsending) func suspendUntilEnd(_ body: (EndWaiter) -> Void) async {
    await withCheckedContinuation(body)
}
#else
typealias Waiter<Value> = UnsafeContinuation<Value, any Error>
typealias EndWaiter = UnsafeContinuation<Void, Never>

@inline(__always)
nonisolated(nonsending) func suspend<Value>(_ body: (Waiter<Value>) -> Void) async throws -> Value {
    try await withUnsafeThrowingContinuation(body)
}

@inline(__always)
nonisolated(nonsending) func suspendUntilEnd(_ body: (EndWaiter) -> Void) async {
    await withUnsafeContinuation(body)
}
#endif
