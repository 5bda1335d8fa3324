/* The registry of live handles (see handles.h). */
#include "handles.h"

#include "core/error.h"

static aipc__hkey hkey(const void *h) { return (aipc__hkey){(uint64_t)(uintptr_t)h, 0}; }

void aipc__handle_init(aipc__handle *h) { atomic_init(&h->refs, 1); }
void aipc__handle_ref(aipc__handle *h) { atomic_fetch_add(&h->refs, 1); }
bool aipc__handle_unref(aipc__handle *h) { return atomic_fetch_sub(&h->refs, 1) == 1; }

aclError aipc__handles_add(aipc__handles *r, const char *call, aipc__handle *h) {
  pthread_mutex_lock(&r->mu);
  int e = aipc__hmap_put(&r->map, hkey(h), h);
  pthread_mutex_unlock(&r->mu);
  if (e != 0) {
    r->ops->release(h);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  return ACL_SUCCESS;
}

static aclError not_live(aipc__handles *r, const char *call, const char *what, const void *handle) {
  return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p is not a live %s (never created, or already destroyed)", call,
                    what, handle, r->ops->kind);
}

aclError aipc__handles_get(aipc__handles *r, const char *call, const char *what, const void *handle,
                           aipc__handle **out) {
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, what);
  /* Found by value: only a live object of this kind is ever dereferenced. */
  pthread_mutex_lock(&r->mu);
  aipc__handle *h = aipc__hmap_get(&r->map, hkey(handle));
  if (h) aipc__handle_ref(h);
  pthread_mutex_unlock(&r->mu);
  if (!h) return not_live(r, call, what, handle);
  *out = h;
  return ACL_SUCCESS;
}

aclError aipc__handles_remove(aipc__handles *r, const char *call, const void *handle, aipc__handle **out) {
  if (!handle) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, r->ops->kind);
  pthread_mutex_lock(&r->mu);
  aipc__handle *h = aipc__hmap_remove(&r->map, hkey(handle));
  pthread_mutex_unlock(&r->mu);
  if (!h) return not_live(r, call, r->ops->kind, handle); /* exactly one of racing destroys wins */
  *out = h;
  return ACL_SUCCESS;
}

aipc__handle *aipc__handles_take_if(aipc__handles *r, bool (*match)(aipc__handle *h, void *arg), void *arg) {
  aipc__handle *found = NULL;
  pthread_mutex_lock(&r->mu);
  size_t cur = 0;
  aipc__hkey k;
  void *v;
  while (aipc__hmap_next(&r->map, &cur, &k, &v)) {
    if (match && !match(v, arg)) continue;
    found = v;
    aipc__hmap_remove(&r->map, k);
    break;
  }
  pthread_mutex_unlock(&r->mu);
  return found;
}

void aipc__handles_finalize(aipc__handles *r) {
  /* One at a time, released outside the lock: a release may wait (a
   * stream's work) or reach the IPC layer, which comes after this lock. */
  for (aipc__handle *h; (h = aipc__handles_take_if(r, NULL, NULL));) r->ops->release(h);
  pthread_mutex_lock(&r->mu);
  aipc__hmap_clear(&r->map);
  pthread_mutex_unlock(&r->mu);
}

void aipc__handles_lock(aipc__handles *r) { pthread_mutex_lock(&r->mu); }
void aipc__handles_unlock(aipc__handles *r) { pthread_mutex_unlock(&r->mu); }

static void hold_all(aipc__handles *r, bool hold) {
  if (!r->ops->fork_hold) return;
  size_t cur = 0;
  void *v;
  while (aipc__hmap_next(&r->map, &cur, NULL, &v)) r->ops->fork_hold(v, hold);
}

void aipc__handles_atfork_prepare(aipc__handles *r) {
  pthread_mutex_lock(&r->mu);
  hold_all(r, true);
}

void aipc__handles_atfork_parent(aipc__handles *r) {
  hold_all(r, false);
  pthread_mutex_unlock(&r->mu);
}

void aipc__handles_atfork_child(aipc__handles *r) {
  /* Only the forking thread exists here: no lock is needed, and the held
   * one is remade rather than released. */
  size_t cur = 0;
  void *v;
  while (aipc__hmap_next(&r->map, &cur, NULL, &v)) r->ops->forget(v);
  aipc__hmap_clear(&r->map);
  r->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}
