/*
 * Open-addressing hash map from a 128-bit key to a non-NULL pointer.
 * Not thread-safe: callers hold their own lock. Values are borrowed.
 */
#ifndef ASCEND_IPC_CORE_HASHMAP_H_
#define ASCEND_IPC_CORE_HASHMAP_H_

#include <stddef.h>
#include <stdint.h>

typedef struct aipc__hkey {
  uint64_t a, b;
} aipc__hkey;

typedef struct aipc__hslot {
  aipc__hkey key;
  void *value; /* NULL: empty; AIPC__HMAP_TOMBSTONE: deleted */
} aipc__hslot;

typedef struct aipc__hmap {
  aipc__hslot *slots;
  size_t cap;  /* power of two, or 0 before the first put */
  size_t len;  /* live entries */
  size_t used; /* live entries plus tombstones */
} aipc__hmap;

#define AIPC__HMAP_INIT {NULL, 0, 0, 0}

void *aipc__hmap_get(const aipc__hmap *m, aipc__hkey key);
/* Inserts or replaces. Returns 0, or -1 when memory ran out (map unchanged). */
int aipc__hmap_put(aipc__hmap *m, aipc__hkey key, void *value);
/* Removes key and returns its value, or NULL if absent. */
void *aipc__hmap_remove(aipc__hmap *m, aipc__hkey key);
/* Frees the table (not the values) and leaves an empty map. */
void aipc__hmap_clear(aipc__hmap *m);

/* Iteration: for (size_t i = 0; aipc__hmap_next(m, &i, &k, &v);) ...
 * Removing the entry just returned is allowed; putting is not. */
int aipc__hmap_next(const aipc__hmap *m, size_t *cursor, aipc__hkey *key, void **value);

#endif
