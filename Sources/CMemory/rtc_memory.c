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

long rtc_release_chunk_pages(uintptr_t address, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size <= page || address % page != 0 || size % page != 0) return 0;
    if (madvise((void *)(address + page), size - page, MADV_DONTNEED) != 0) return -1;
    return (long)((size - page) / page);
}

long rtc_drop_clean_file_pages(void) {
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (!smaps) return -1;
    char line[4096];
    unsigned long start = 0, end = 0;
    int candidate = 0;
    long rss = 0, anonymous = -1, dropped = 0;
    // One mapping's header, then its "Key: value kB" lines; act on a mapping once its
    // Anonymous line is read (it follows Rss).
    while (fgets(line, sizeof line, smaps)) {
        unsigned long a, b, offset, inode;
        char perms[5], device[16];
        int path = 0;
        if (sscanf(line, "%lx-%lx %4s %lx %15s %lu %n", &a, &b, perms, &offset, device, &inode, &path) >= 6) {
            start = a; end = b;
            // Read-only private file pages: code and constants of the executable and libraries.
            // Writable data and RELRO (which holds relocated, private copies) are never candidates:
            // their pages are anonymous copies, so they also fail the Anonymous check below.
            candidate = inode != 0 && path != 0 && line[path] == '/' && perms[1] == '-' && perms[3] == 'p';
            rss = 0; anonymous = -1;
            continue;
        }
        if (!candidate) continue;
        if (sscanf(line, "Rss: %ld kB", &rss) == 1) continue;
        if (sscanf(line, "Anonymous: %ld kB", &anonymous) == 1) {
            if (anonymous == 0 && rss > 0 && madvise((void *)start, end - start, MADV_DONTNEED) == 0) dropped += rss;
            candidate = 0;
        }
    }
    fclose(smaps);
    return dropped;
}

long rtc_resident_pages(uintptr_t address, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = address - address % page;
    size_t length = size + (address - start);
    size_t count = (length + page - 1) / page;
    unsigned char *vector = malloc(count);
    if (!vector) return -1;
    long resident = -1;
    if (mincore((void *)start, length, vector) == 0) {
        resident = 0;
        for (size_t i = 0; i < count; i++) resident += vector[i] & 1;
    }
    free(vector);
    return resident;
}

size_t rtc_heap_bytes_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks + info.hblkhd;
}
