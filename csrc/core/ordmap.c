#include "ordmap.h"

static uint64_t prio_of(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return x;
}

/* Splits t into keys < key (*lo) and keys >= key (*hi). */
static void split(aipc__onode *t, uintptr_t key, aipc__onode **lo, aipc__onode **hi) {
  while (t) {
    if (t->key < key) {
      *lo = t;
      lo = &t->kid[1];
      t = t->kid[1];
    } else {
      *hi = t;
      hi = &t->kid[0];
      t = t->kid[0];
    }
  }
  *lo = NULL;
  *hi = NULL;
}

/* Joins a and b where every key of a < every key of b. */
static aipc__onode *merge(aipc__onode *a, aipc__onode *b) {
  aipc__onode *root = NULL, **link = &root;
  while (a && b) {
    if (a->prio >= b->prio) {
      *link = a;
      link = &a->kid[1];
      a = a->kid[1];
    } else {
      *link = b;
      link = &b->kid[0];
      b = b->kid[0];
    }
  }
  *link = a ? a : b;
  return root;
}

aipc__onode *aipc__omap_get(const aipc__omap *m, uintptr_t key) {
  aipc__onode *t = m->root;
  while (t && t->key != key) t = t->kid[t->key < key];
  return t;
}

int aipc__omap_insert(aipc__omap *m, aipc__onode *n) {
  if (aipc__omap_get(m, n->key)) return -1;
  n->prio = prio_of((uint64_t)n->key);
  aipc__onode **link = &m->root;
  while (*link && (*link)->prio >= n->prio) link = &(*link)->kid[(*link)->key < n->key];
  split(*link, n->key, &n->kid[0], &n->kid[1]);
  *link = n;
  m->len++;
  return 0;
}

void aipc__omap_remove(aipc__omap *m, aipc__onode *n) {
  aipc__onode **link = &m->root;
  while (*link && *link != n) link = &(*link)->kid[(*link)->key < n->key];
  if (!*link) return;
  *link = merge(n->kid[0], n->kid[1]);
  n->kid[0] = n->kid[1] = NULL;
  m->len--;
}

aipc__onode *aipc__omap_floor(const aipc__omap *m, uintptr_t key) {
  aipc__onode *t = m->root, *best = NULL;
  while (t) {
    if (t->key == key) return t;
    if (t->key < key) {
      best = t;
      t = t->kid[1];
    } else {
      t = t->kid[0];
    }
  }
  return best;
}

aipc__onode *aipc__omap_next(const aipc__omap *m, uintptr_t key) {
  aipc__onode *t = m->root, *best = NULL;
  while (t) {
    if (t->key > key) {
      best = t;
      t = t->kid[0];
    } else {
      t = t->kid[1];
    }
  }
  return best;
}

void aipc__omap_drain(aipc__omap *m, void (*fn)(aipc__onode *, void *), void *arg) {
  /* Rotate left children up so the walk needs no stack: each step either
   * consumes the root or turns a left edge into a right one. */
  aipc__onode *t = m->root;
  while (t) {
    if (t->kid[0]) {
      aipc__onode *l = t->kid[0];
      t->kid[0] = l->kid[1];
      l->kid[1] = t;
      t = l;
    } else {
      aipc__onode *next = t->kid[1];
      t->kid[1] = NULL;
      fn(t, arg);
      t = next;
    }
  }
  m->root = NULL;
  m->len = 0;
}
