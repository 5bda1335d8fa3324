/*
 * Buddy allocator over the offsets of one device arena. Order 0 is one page
 * (4 KiB). Its metadata lives entirely in malloc'ed nodes outside the arena,
 * so it never writes into arena pages. A request is served from the smallest
 * power-of-two block that fits and the unused tail goes straight back, so a
 * block costs its page-rounded size, not the next power of two.
 * Not thread-safe: memory.c calls it under the memory write lock.
 */
#ifndef ASCEND_IPC_EMU_BUDDY_H_
#define ASCEND_IPC_EMU_BUDDY_H_

#include <stdbool.h>
#include <stdint.h>

#include "core/hashmap.h"

#define AIPC__BUDDY_MAX_ORDER 40 /* 4 KiB << 40 = 4 PiB */

struct aipc__bfree;

typedef struct aipc__buddy {
  unsigned max_order;                               /* total size = page << max_order */
  struct aipc__bfree *heads[AIPC__BUDDY_MAX_ORDER + 1]; /* free blocks by order */
  aipc__hmap by_off;                                /* offset -> free block */
} aipc__buddy;

/* size: a power of two, a multiple of the page size. Returns 0 or -1 (no memory). */
int aipc__buddy_init(aipc__buddy *b, uint64_t size);
/* len: a page multiple > 0. Returns 0 and *off, or -1 when no free range fits
 * (or memory for metadata ran out). */
int aipc__buddy_alloc(aipc__buddy *b, uint64_t len, uint64_t *off);
/* Returns [off, off+len) from an earlier alloc of exactly len. */
void aipc__buddy_free(aipc__buddy *b, uint64_t off, uint64_t len);
void aipc__buddy_destroy(aipc__buddy *b);
/* Whether every allocation went back: the whole range is one free block again. */
bool aipc__buddy_all_free(const aipc__buddy *b);

#endif
