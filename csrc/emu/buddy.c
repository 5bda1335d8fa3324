#include "buddy.h"

#include <stdlib.h>

#include "emu.h"

typedef struct aipc__bfree {
  struct aipc__bfree *prev, *next;
  uint64_t off;
  unsigned order;
} bfree;

static aipc__hkey off_key(uint64_t off) { return (aipc__hkey){off, 0}; }

static uint64_t bytes_of(unsigned order) { return (uint64_t)AIPC_PAGE_SIZE << order; }

static void list_unlink(aipc__buddy *b, bfree *f) {
  if (f->prev)
    f->prev->next = f->next;
  else
    b->heads[f->order] = f->next;
  if (f->next) f->next->prev = f->prev;
  f->prev = f->next = NULL;
}

static void list_push(aipc__buddy *b, bfree *f) {
  f->prev = NULL;
  f->next = b->heads[f->order];
  if (f->next) f->next->prev = f;
  b->heads[f->order] = f;
}

/* Records a free block without merging. -1 when memory ran out. */
static int add_free(aipc__buddy *b, uint64_t off, unsigned order) {
  bfree *f = malloc(sizeof *f);
  if (!f) return -1;
  f->off = off;
  f->order = order;
  if (aipc__hmap_put(&b->by_off, off_key(off), f) != 0) {
    free(f);
    return -1;
  }
  list_push(b, f);
  return 0;
}

/* Frees one aligned block, merging with free buddies of the same order. */
static void free_block(aipc__buddy *b, uint64_t off, unsigned order) {
  while (order < b->max_order) {
    bfree *buddy = aipc__hmap_get(&b->by_off, off_key(off ^ bytes_of(order)));
    if (!buddy || buddy->order != order) break;
    aipc__hmap_remove(&b->by_off, off_key(buddy->off));
    list_unlink(b, buddy);
    free(buddy);
    off &= ~bytes_of(order);
    order++;
  }
  /* Out of memory here only loses the range until the arena is torn down. */
  (void)add_free(b, off, order);
}

/* Frees [off, off+len) as the largest aligned blocks it splits into. */
static void free_range(aipc__buddy *b, uint64_t off, uint64_t len) {
  while (len > 0) {
    unsigned order = 0;
    while (order < b->max_order && (off & bytes_of(order)) == 0 && bytes_of(order + 1) <= len) order++;
    free_block(b, off, order);
    off += bytes_of(order);
    len -= bytes_of(order);
  }
}

int aipc__buddy_init(aipc__buddy *b, uint64_t size) {
  *b = (aipc__buddy){0};
  b->by_off = (aipc__hmap)AIPC__HMAP_INIT;
  unsigned order = 0;
  while (bytes_of(order) < size && order < AIPC__BUDDY_MAX_ORDER) order++;
  b->max_order = order;
  return add_free(b, 0, order);
}

int aipc__buddy_alloc(aipc__buddy *b, uint64_t len, uint64_t *off) {
  unsigned want = 0;
  while (bytes_of(want) < len) {
    if (++want > b->max_order) return -1;
  }
  unsigned order = want;
  while (order <= b->max_order && !b->heads[order]) order++;
  if (order > b->max_order) return -1;
  bfree *f = b->heads[order];
  list_unlink(b, f);
  aipc__hmap_remove(&b->by_off, off_key(f->off));
  uint64_t base = f->off;
  free(f);
  /* Split down to the order wanted, freeing upper halves... */
  while (order > want) {
    order--;
    free_block(b, base + bytes_of(order), order);
  }
  /* ...then give back the tail beyond len. */
  if (bytes_of(want) > len) free_range(b, base + len, bytes_of(want) - len);
  *off = base;
  return 0;
}

void aipc__buddy_free(aipc__buddy *b, uint64_t off, uint64_t len) { free_range(b, off, len); }

void aipc__buddy_destroy(aipc__buddy *b) {
  for (unsigned o = 0; o <= AIPC__BUDDY_MAX_ORDER; o++) {
    bfree *f = b->heads[o];
    while (f) {
      bfree *next = f->next;
      free(f);
      f = next;
    }
    b->heads[o] = NULL;
  }
  aipc__hmap_clear(&b->by_off);
}

bool aipc__buddy_all_free(const aipc__buddy *b) {
  const bfree *f = b->heads[b->max_order];
  return b->by_off.len == 1 && f != NULL && f->off == 0;
}
