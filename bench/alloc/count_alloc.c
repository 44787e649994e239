/* SPDX-License-Identifier: MIT */
/*
 * count_alloc.so - counts heap allocations of a process, for the allocation benchmark.
 *
 *   COUNT_ALLOC_FILE=/tmp/counters LD_PRELOAD=bin/count_alloc.so ./server ...
 *
 * Interposes malloc, calloc, realloc, the aligned allocators and free, forwards each to
 * glibc (__libc_*), and keeps the counts in a small file mapped shared, so that another
 * process (bench/alloc_bench.py) can read them at any moment while the server runs:
 * snapshot, drive a known number of operations, snapshot again, divide.
 *
 * The file holds four little-endian uint64 values:
 *   allocations (malloc, calloc, aligned allocations, and realloc of NULL)
 *   reallocations (realloc of a live block)
 *   frees (of non-NULL pointers)
 *   bytes requested by allocations and reallocations
 * The Swift runtime (linked statically into libsocketkit.so) allocates through malloc
 * and posix_memalign, so its allocations are counted too.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

typedef struct {
    _Atomic uint64_t allocations;
    _Atomic uint64_t reallocations;
    _Atomic uint64_t frees;
    _Atomic uint64_t bytes;
} counters_t;

static counters_t early;            /* counts made before the file is mapped */
static counters_t *counters = &early;

__attribute__((constructor)) static void map_counters(void) {
    const char *path = getenv("COUNT_ALLOC_FILE");
    if (path == NULL || path[0] == '\0') return;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    if (ftruncate(fd, (off_t)sizeof(counters_t)) != 0) { close(fd); return; }
    void *shared = mmap(NULL, sizeof(counters_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shared == MAP_FAILED) return;
    counters_t *mapped = shared;
    atomic_store(&mapped->allocations, atomic_load(&early.allocations));
    atomic_store(&mapped->reallocations, atomic_load(&early.reallocations));
    atomic_store(&mapped->frees, atomic_load(&early.frees));
    atomic_store(&mapped->bytes, atomic_load(&early.bytes));
    counters = mapped;
}

static inline void count_allocation(size_t size) {
    atomic_fetch_add_explicit(&counters->allocations, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters->bytes, size, memory_order_relaxed);
}

void *malloc(size_t size) {
    count_allocation(size);
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    count_allocation(count * size);
    return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
    if (pointer == NULL) {
        count_allocation(size);
    } else {
        atomic_fetch_add_explicit(&counters->reallocations, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&counters->bytes, size, memory_order_relaxed);
    }
    return __libc_realloc(pointer, size);
}

void free(void *pointer) {
    if (pointer != NULL) atomic_fetch_add_explicit(&counters->frees, 1, memory_order_relaxed);
    __libc_free(pointer);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    count_allocation(size);
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return 12; /* ENOMEM */
    *result = pointer;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
    count_allocation(size);
    return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
    count_allocation(size);
    return __libc_memalign(alignment, size);
}
