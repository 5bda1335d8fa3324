/* Where imports are mapped: anchors that keep page tables (mapper.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "emu/emu.h"
#include "emu/ipc/mapper.h"
#include "os/os.h"

/* Imports live at once above anchors; the rest go where the kernel puts them. */
#define ANCHORS 16
/* The free address space an anchor is placed below, so an import of up to
 * this much (less its page) fits above it while nothing else moves in. */
#define ANCHOR_ROOM ((size_t)64 << 30)
#define TWO_MIB ((uintptr_t)2 << 20)

enum { NEW, FREE, TAKEN, DEAD }; /* an anchor's state */

static struct {
  uint8_t state[ANCHORS];
  uintptr_t at[ANCHORS]; /* the anchor page's address, once made */
} g;

/* Makes an anchor: a PROT_NONE page at the start of a 2 MiB-aligned stretch
 * of ANCHOR_ROOM free bytes, found by reserving it and giving back all but
 * that page. Its address, or 0. */
static uintptr_t anchor_make(void) {
  size_t span = ANCHOR_ROOM + TWO_MIB;
  uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return 0;
  uintptr_t start = (uintptr_t)r, a = (start + TWO_MIB - 1) & ~(TWO_MIB - 1);
  if (a > start) munmap(r, a - start);
  munmap((void *)(a + AIPC_PAGE_SIZE), start + span - a - AIPC_PAGE_SIZE);
  return a;
}

/* Takes a free anchor (making one if none is made yet): its index, or -1. */
static int anchor_take(void) {
  for (int i = 0; i < ANCHORS; i++) {
    uint8_t s = FREE;
    if (__atomic_compare_exchange_n(&g.state[i], &s, TAKEN, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return i;
  }
  for (int i = 0; i < ANCHORS; i++) {
    uint8_t s = NEW;
    if (!__atomic_compare_exchange_n(&g.state[i], &s, TAKEN, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) continue;
    uintptr_t a = anchor_make();
    if (a == 0) {
      __atomic_store_n(&g.state[i], NEW, __ATOMIC_RELEASE); /* out of address space now, maybe not later */
      return -1;
    }
    __atomic_store_n(&g.at[i], a, __ATOMIC_RELEASE);
    return i;
  }
  return -1;
}

/* Where above an anchor (or a reservation's 2 MiB boundary) a mapping of
 * size bytes at offset goes: 2 MiB and more go where each address sits at
 * its file offset's place in 2 MiB, so that the allocation's huge pages
 * (transparent or hugetlbfs) map whole, one fault each; less goes beside
 * the anchor's page, in page tables the anchor keeps. */
static uintptr_t skew_of(uint64_t offset, size_t size) {
  return size >= TWO_MIB ? TWO_MIB + (uintptr_t)(offset & (TWO_MIB - 1)) : AIPC_PAGE_SIZE;
}

/* Maps where the kernel finds room, on skew's place in 2 MiB. */
static void *map_anywhere(int fd, uint64_t offset, size_t size, uintptr_t skew) {
  if (skew == AIPC_PAGE_SIZE) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    return p == MAP_FAILED ? NULL : p;
  }
  size_t span = size + 2 * TWO_MIB;
  uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return NULL;
  uintptr_t a = (((uintptr_t)r + TWO_MIB - 1) & ~(TWO_MIB - 1)) + (skew - TWO_MIB);
  void *p = mmap((void *)a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
  int e = errno;
  if (p == MAP_FAILED) {
    munmap(r, span);
    errno = e;
    return NULL;
  }
  if (a > (uintptr_t)r) munmap(r, a - (uintptr_t)r);
  munmap((void *)(a + size), (uintptr_t)r + span - a - size);
  return p;
}

void *aipc__mapper_map(int fd, uint64_t offset, size_t size, bool anchored) {
  uintptr_t skew = skew_of(offset, size);
  int i = anchored && size <= ANCHOR_ROOM - 2 * TWO_MIB ? anchor_take() : -1;
  if (i >= 0) {
    void *want = (void *)(g.at[i] + skew);
    void *p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, (off_t)offset);
    if (p == want) return p;
    if (p == MAP_FAILED && errno != EEXIST) { /* the descriptor's fault, not the anchor's */
      __atomic_store_n(&g.state[i], FREE, __ATOMIC_RELEASE);
      return NULL;
    }
    /* Something else moved in above the anchor (EEXIST), or a kernel before
     * 4.17 took the address as a hint: this anchor is done with. */
    __atomic_store_n(&g.state[i], DEAD, __ATOMIC_RELEASE);
    if (p != MAP_FAILED) {
      if (((uintptr_t)p & (TWO_MIB - 1)) == (skew & (TWO_MIB - 1))) return p;
      munmap(p, size); /* a hint taken elsewhere, off its huge pages' places */
    }
  }
  return map_anywhere(fd, offset, size, skew);
}

void aipc__mapper_unmap(void *p, size_t size) {
  munmap(p, size); /* first: the next import may take the anchor at once */
  for (int i = 0; i < ANCHORS; i++) {
    uintptr_t at = __atomic_load_n(&g.at[i], __ATOMIC_ACQUIRE);
    uintptr_t skew = (uintptr_t)p - at; /* what skew_of gave for it, if it sits above this anchor */
    if (__atomic_load_n(&g.state[i], __ATOMIC_ACQUIRE) == TAKEN && at != 0 && (uintptr_t)p > at &&
        (skew == AIPC_PAGE_SIZE || (skew >= TWO_MIB && skew < 2 * TWO_MIB))) {
      __atomic_store_n(&g.state[i], FREE, __ATOMIC_RELEASE);
      return;
    }
  }
}

void aipc__mapper_finalize(void) {
  for (int i = 0; i < ANCHORS; i++) {
    if (g.state[i] != NEW && g.at[i] != 0) munmap((void *)g.at[i], AIPC_PAGE_SIZE);
    g.state[i] = NEW;
    g.at[i] = 0;
  }
}

void aipc__mapper_atfork_child(void) {
  for (int i = 0; i < ANCHORS; i++) {
    g.state[i] = NEW;
    g.at[i] = 0;
  }
}
