#include "hashmap.h"

#include <stdlib.h>

static char tombstone_;
#define TOMBSTONE ((void *)&tombstone_)

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static size_t slot_of(aipc__hkey k, size_t cap) {
  return (size_t)(mix64(k.a ^ mix64(k.b + 0x9e3779b97f4a7c15ULL)) & (cap - 1));
}

static int same(aipc__hkey x, aipc__hkey y) { return x.a == y.a && x.b == y.b; }

static aipc__hslot *find(const aipc__hmap *m, aipc__hkey key) {
  if (m->cap == 0) return NULL;
  for (size_t i = slot_of(key, m->cap), n = 0; n < m->cap; i = (i + 1) & (m->cap - 1), n++) {
    aipc__hslot *s = &m->slots[i];
    if (s->value == NULL) return NULL;
    if (s->value != TOMBSTONE && same(s->key, key)) return s;
  }
  return NULL;
}

void *aipc__hmap_get(const aipc__hmap *m, aipc__hkey key) {
  aipc__hslot *s = find(m, key);
  return s ? s->value : NULL;
}

static int resize(aipc__hmap *m, size_t cap) {
  aipc__hslot *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < m->cap; i++) {
    aipc__hslot *s = &m->slots[i];
    if (s->value == NULL || s->value == TOMBSTONE) continue;
    size_t j = slot_of(s->key, cap);
    while (slots[j].value) j = (j + 1) & (cap - 1);
    slots[j] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->len;
  return 0;
}

int aipc__hmap_put(aipc__hmap *m, aipc__hkey key, void *value) {
  aipc__hslot *s = find(m, key);
  if (s) {
    s->value = value;
    return 0;
  }
  /* Keep the load (tombstones included) under 1/2 so probes stay short. */
  if ((m->used + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap : 16;
    while ((m->len + 1) * 4 > cap) cap *= 2;
    if (resize(m, cap) != 0) return -1;
  }
  size_t i = slot_of(key, m->cap);
  while (m->slots[i].value && m->slots[i].value != TOMBSTONE) i = (i + 1) & (m->cap - 1);
  if (m->slots[i].value == NULL) m->used++;
  m->slots[i].key = key;
  m->slots[i].value = value;
  m->len++;
  return 0;
}

void *aipc__hmap_remove(aipc__hmap *m, aipc__hkey key) {
  aipc__hslot *s = find(m, key);
  if (!s) return NULL;
  void *v = s->value;
  s->value = TOMBSTONE;
  m->len--;
  return v;
}

void aipc__hmap_clear(aipc__hmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = m->used = 0;
}

int aipc__hmap_next(const aipc__hmap *m, size_t *cursor, aipc__hkey *key, void **value) {
  for (size_t i = *cursor; i < m->cap; i++) {
    aipc__hslot *s = &m->slots[i];
    if (s->value == NULL || s->value == TOMBSTONE) continue;
    *cursor = i + 1;
    if (key) *key = s->key;
    if (value) *value = s->value;
    return 1;
  }
  *cursor = m->cap;
  return 0;
}
