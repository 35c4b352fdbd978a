// Process-memory helpers for the screen sharer's budget (docs/screen-share.md, "Memory").
#ifndef RTC_MEMORY_H
#define RTC_MEMORY_H
#include <stddef.h>
#include <stdint.h>

/// Lists the glibc mmapped heap chunks (plain mallocs big enough to get a mapping of their own)
/// whose size lies in [min_size, max_size] and that are laid end to end from the start of a private
/// anonymous mapping, where new mappings land. Writes at most `capacity` chunk addresses and sizes;
/// returns how many were found.
int rtc_find_mmapped_chunks(size_t min_size, size_t max_size, uintptr_t *addresses, size_t *sizes, int capacity);

/// Gives the all-zero pages of the chunk at `address` (after its first page, which holds the header)
/// back to the kernel with MADV_DONTNEED. A released page reads back as zero, so the owner sees no
/// change; only the resident set shrinks. The caller must own the chunk and know that no other
/// thread writes it meanwhile. Returns the pages released.
long rtc_release_zero_pages(uintptr_t address, size_t size);

/// Pins glibc malloc's thresholds for a small process: big buffers get their own mappings (and go
/// back to the kernel when freed) and at most `arenas` arenas hold the small ones.
void rtc_malloc_tune_for_small_process(int arenas, size_t mmap_threshold);

/// Resident set size of this process, KiB (VmRSS), or -1.
long rtc_resident_kib(void);
#endif
