#define _GNU_SOURCE
#include "rtc_memory.h"
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// glibc's chunk header: prev_size, then size with flag bits (PREV_INUSE 1, IS_MMAPPED 2,
// NON_MAIN_ARENA 4). An mmapped chunk of a plain malloc starts a page, with prev_size 0 and
// exactly IS_MMAPPED among the flags.
static int is_mmapped_chunk(const uint64_t *header, size_t room, size_t page, size_t *size) {
    if (header[0] != 0) return 0;
    uint64_t field = header[1];
    if ((field & 7) != 2) return 0;
    uint64_t bytes = field & ~(uint64_t)7;
    if (bytes == 0 || bytes % page != 0 || bytes > room) return 0;
    *size = (size_t)bytes;
    return 1;
}

static int page_is_zero(const unsigned char *page, size_t length) {
    const uint64_t *words = (const uint64_t *)page;
    for (size_t i = 0; i < length / 8; i++)
        if (words[i] != 0) return 0;
    return 1;
}

/// The end of the old range holding `address`, or 0 when it was not mapped.
static uintptr_t mapped_before(uintptr_t address, const uintptr_t *starts, const uintptr_t *ends, int count) {
    for (int i = 0; i < count; i++)
        if (address >= starts[i] && address < ends[i]) return ends[i];
    return 0;
}

int rtc_snapshot_mappings(uintptr_t *starts, uintptr_t *ends, int capacity) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 0;
    char line[512];
    int count = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        if (sscanf(line, "%lx-%lx", &start, &end) != 2) continue;
        if (count < capacity) {
            starts[count] = start;
            ends[count] = end;
        }
        count++;
    }
    fclose(maps);
    return count;
}

int rtc_find_new_mmapped_chunks(const uintptr_t *starts, const uintptr_t *ends, int count, size_t min_size, size_t max_size,
                                uintptr_t *addresses, size_t *sizes, int capacity) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return 0;
    char line[512];
    int found = 0;
    while (found < capacity && fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char perms[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &start, &end, perms, path) < 3) continue;
        if (path[0] != '\0' || strcmp(perms, "rw-p") != 0) continue;
        // New memory starts where a page was not mapped before but the page below it was (or is
        // the mapping's start); chunks from there are laid end to end.
        for (unsigned long at = start; at + page <= end && found < capacity; at += page) {
            uintptr_t old_end = mapped_before(at, starts, ends, count);
            if (old_end) {
                at = old_end - page;  // skip the rest of the old range
                continue;
            }
            if (at != start && !mapped_before(at - page, starts, ends, count)) continue;
            unsigned long chunk = at;
            while (chunk + page <= end && found < capacity) {
                size_t size;
                if (mapped_before(chunk, starts, ends, count)) break;
                if (!is_mmapped_chunk((const uint64_t *)chunk, end - chunk, page, &size)) break;
                if (size >= min_size && size <= max_size) {
                    addresses[found] = chunk;
                    sizes[found] = size;
                    found++;
                }
                chunk += size;
            }
            if (chunk > at) at = chunk - page;  // go on after the chunks just walked
        }
    }
    fclose(maps);
    return found;
}

long rtc_release_zero_pages(uintptr_t address, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    long released = 0;
    for (uintptr_t p = address + page; p + page <= address + size; p += page) {
        if (page_is_zero((const unsigned char *)p, page) && madvise((void *)p, page, MADV_DONTNEED) == 0) released++;
    }
    return released;
}

void rtc_malloc_map_big_buffers(size_t mmap_threshold) {
    mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold);
}

void rtc_malloc_tune_for_small_process(int arenas, size_t mmap_threshold) {
    mallopt(M_ARENA_MAX, arenas);
    rtc_malloc_map_big_buffers(mmap_threshold);
    mallopt(M_TRIM_THRESHOLD, (int)mmap_threshold);
}
