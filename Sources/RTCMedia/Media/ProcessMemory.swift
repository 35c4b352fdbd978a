internal import CMemory

/// The malloc settings of a process with a memory budget (the screen sharers).
public enum ProcessMemory {
    /// For a process with a memory budget: big buffers (frames, codec state) get mappings of their
    /// own that go back to the kernel when freed, instead of glibc's threshold drifting up to 32 MB
    /// and keeping freed frames in the heap; and two arenas instead of eight per core.
    public static func tuneForSmallProcess() {
        rtc_malloc_tune_for_small_process(2, 256 * 1024)
    }

    /// Only the first half of that: buffers of `threshold` bytes and more always get mappings of
    /// their own. `VP8Encoder` can give back its unused token pages only then (with glibc's sliding
    /// threshold, a freed encoder lets the next one's 22 MB land inside the heap).
    public static func mapBigBuffers(threshold: Int = 256 * 1024) {
        rtc_malloc_map_big_buffers(threshold)
    }
}
