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

/// Pins glibc malloc's thresholds for a small process: big buffers get their own mappings (and go
/// back to the kernel when freed) and at most `arenas` arenas hold the small ones.
void rtc_malloc_tune_for_small_process(int arenas, size_t mmap_threshold);

/// Only pins the mmap threshold (which also stops glibc from raising it as mapped chunks are freed).
void rtc_malloc_map_big_buffers(size_t mmap_threshold);

#endif
