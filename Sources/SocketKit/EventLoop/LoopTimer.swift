// SPDX-License-Identifier: MIT
/// A one-shot timer owned by an object that lives on one loop (a read timeout, a connect
/// timeout, a Happy Eyeballs delay, an accept back-off). The owner creates it once and
/// re-arms it as often as needed, so arming a timeout allocates nothing.
final class LoopTimer {
    fileprivate(set) var deadline: UInt64 = 0
    fileprivate var heapIndex = -1
    let action: () -> Void

    init(_ action: @escaping () -> Void) {
        self.action = action
    }

    var isScheduled: Bool { heapIndex >= 0 }
}

/// A binary min-heap of timers by deadline, with O(log n) cancellation.
struct TimerHeap {
    private var items: [LoopTimer] = []

    var isEmpty: Bool { items.isEmpty }
    var earliestDeadline: UInt64? { items.first?.deadline }

    mutating func schedule(_ timer: LoopTimer, deadline: UInt64) {
        if timer.isScheduled {
            remove(timer)
        }
        timer.deadline = deadline
        timer.heapIndex = items.count
        items.append(timer)
        siftUp(items.count - 1)
    }

    mutating func remove(_ timer: LoopTimer) {
        let index = timer.heapIndex
        guard index >= 0, index < items.count, items[index] === timer else { return }
        let last = items.count - 1
        if index != last {
            items.swapAt(index, last)
            items[index].heapIndex = index
        }
        items.removeLast()
        timer.heapIndex = -1
        if index < items.count {
            siftDown(index)
            siftUp(index)
        }
    }

    /// Removes and returns the earliest timer if it is due at `now`.
    mutating func popExpired(now: UInt64) -> LoopTimer? {
        guard let first = items.first, first.deadline <= now else { return nil }
        remove(first)
        return first
    }

    mutating func removeAll() {
        for timer in items { timer.heapIndex = -1 }
        items.removeAll()
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].deadline < items[parent].deadline else { break }
            items.swapAt(child, parent)
            items[child].heapIndex = child
            items[parent].heapIndex = parent
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < items.count else { break }
            var smallest = left
            let right = left + 1
            if right < items.count && items[right].deadline < items[left].deadline { smallest = right }
            guard items[smallest].deadline < items[parent].deadline else { break }
            items.swapAt(smallest, parent)
            items[smallest].heapIndex = smallest
            items[parent].heapIndex = parent
            parent = smallest
        }
    }
}
