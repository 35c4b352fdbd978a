// Process-memory helpers for the screen sharer's budget (docs/screen-share.md, "Memory").
#ifndef RTC_MEMORY_H
#define RTC_MEMORY_H
#include <stddef.h>
#include <stdint.h>

/// Writes the address ranges mapped now (at most `capacity`); returns how many there are, which
/// may be more than `capacity` (then call again with room for them).
int rtc_snapshot_mappings(uintptr_t *starts, uintptr_t *ends, int capacity);

/// Lists the glibc mmapped heap chunks (plain mallocs big enough to get a mapping of their own) of
/// a size in [min_size, max_size] that lie in memory mapped since the snapshot `starts`/`ends`.
/// Writes at most `capacity` chunk addresses and sizes; returns how many were found.
int rtc_find_new_mmapped_chunks(const uintptr_t *starts, const uintptr_t *ends, int count, size_t min_size, size_t max_size,
                                uintptr_t *addresses, size_t *sizes, int capacity);

/// Gives the all-zero pages of the chunk at `address` (after its first page, which holds the header)
/// back to the kernel with MADV_DONTNEED. A released page reads back as zero, so the owner sees no
/// change; only the resident set shrinks. The caller must own the chunk and know that no other
/// thread writes it meanwhile. Returns the pages released.
long rtc_release_zero_pages(uintptr_t address, size_t size);

/// Gives every page of the mmapped chunk at `address` after its first (which holds the header) back
/// to the kernel: they read back as zero. Only for a buffer whose contents are dead, such as a scratch
/// buffer between two uses. Returns the pages released, or -1 when madvise fails.
long rtc_release_chunk_pages(uintptr_t address, size_t size);

/// Heap bytes in use now (glibc's mallinfo2: small blocks plus mmapped chunks).
size_t rtc_heap_bytes_in_use(void);

/// Pins glibc malloc's thresholds for a small process: big buffers get their own mappings (and go
/// back to the kernel when freed) and at most `arenas` arenas hold the small ones.
void rtc_malloc_tune_for_small_process(int arenas, size_t mmap_threshold);

/// Only pins the mmap threshold (which also stops glibc from raising it as mapped chunks are freed).
void rtc_malloc_map_big_buffers(size_t mmap_threshold);

/// Unmaps the resident pages of the process's read-only file mappings (code and constants of the
/// executable and libraries) that hold no private copies: they are clean page-cache pages, so the
/// next use maps them again from the file. Startup code (dynamic linking, relocation tables,
/// runtime and library initialisation) then stops counting in the resident set. Returns the KiB
/// that were resident in the mappings dropped, or -1 when /proc/self/smaps cannot be read.
long rtc_drop_clean_file_pages(void);

/// How many pages of [address, address + size) are resident (mincore), or -1 on error.
long rtc_resident_pages(uintptr_t address, size_t size);

#endif
