/*
 * Intrusive ordered map from an address-sized key to a node embedded in the
 * caller's struct (a treap whose priorities are a hash of the key, so it
 * needs no random state). Every operation is O(log n) expected.
 * Not thread-safe: callers hold their own lock.
 */
#ifndef ASCEND_IPC_CORE_ORDMAP_H_
#define ASCEND_IPC_CORE_ORDMAP_H_

#include <stddef.h>
#include <stdint.h>

typedef struct aipc__onode {
  struct aipc__onode *kid[2];
  uintptr_t key;
  uint64_t prio;
} aipc__onode;

typedef struct aipc__omap {
  aipc__onode *root;
  size_t len;
} aipc__omap;

#define AIPC__OMAP_INIT {NULL, 0}

/* Inserts n (n->key set by the caller). Returns 0, or -1 if the key is taken. */
int aipc__omap_insert(aipc__omap *m, aipc__onode *n);
/* Unlinks n, which must be in m. */
void aipc__omap_remove(aipc__omap *m, aipc__onode *n);
/* Node with exactly key, or NULL. */
aipc__onode *aipc__omap_get(const aipc__omap *m, uintptr_t key);
/* Node with the greatest key <= key, or NULL. */
aipc__onode *aipc__omap_floor(const aipc__omap *m, uintptr_t key);
/* Node with the smallest key > key, or NULL (in-order walk: start from 0 with
 * aipc__omap_get(m, 0) ?: aipc__omap_next(m, 0)). */
aipc__onode *aipc__omap_next(const aipc__omap *m, uintptr_t key);
/* Unlinks every node, calling fn(node, arg) on each (fn may free it), and
 * leaves the map empty. */
void aipc__omap_drain(aipc__omap *m, void (*fn)(aipc__onode *, void *), void *arg);

#endif
