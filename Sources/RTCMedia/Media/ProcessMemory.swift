internal import CMemory
import Synchronization

/// The malloc settings of a process with a memory budget (the screen sharers).
public enum ProcessMemory {
    /// For a process with a memory budget: big buffers (frames, codec state) get mappings of their
    /// own that go back to the kernel when freed, instead of glibc's threshold drifting up to 32 MB
    /// and keeping freed frames in the heap; and two arenas instead of eight per core.
    /// It also marks the process as budgeted (`isBudgeted`): codecs then trade a little CPU for
    /// resident memory (see `VP8Encoder`).
    public static func tuneForSmallProcess() {
        rtc_malloc_tune_for_small_process(2, 256 * 1024)
        budgeted.store(true, ordering: .relaxed)
    }

    private static let budgeted = Atomic(false)

    /// Whether `tuneForSmallProcess()` was called: the process runs under a memory budget.
    public static var isBudgeted: Bool { budgeted.load(ordering: .relaxed) }

    /// Only the first half of that: buffers of `threshold` bytes and more always get mappings of
    /// their own. `VP8Encoder` can give back its unused token pages only then (with glibc's sliding
    /// threshold, a freed encoder lets the next one's 22 MB land inside the heap).
    public static func mapBigBuffers(threshold: Int = 256 * 1024) {
        rtc_malloc_map_big_buffers(threshold)
    }

    /// Drops the resident pages of the read-only file mappings that hold no private copies (code
    /// and constants of the executable and its libraries): clean page-cache pages that the next use
    /// maps again from the file. Code that ran once (dynamic linking, relocation tables, library and
    /// runtime initialisation) stops counting in the resident set. Returns the KiB dropped.
    @discardableResult
    public static func dropCleanFilePages() -> Int {
        Int(rtc_drop_clean_file_pages())
    }
}
