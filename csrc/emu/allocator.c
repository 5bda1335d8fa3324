/*
 * External allocators (acl_rt_allocator.h). A program describes its own
 * allocator in a description (an object and four functions) and registers
 * it for a stream; whoever allocates workspace for work on that stream asks
 * for it back with aclrtAllocatorGetByStream. As in CANN's runtime
 * (src/acl/aclrt_impl/allocator.cpp), registering keeps a copy of the
 * description's fields with the description's handle, so changing or
 * destroying the description afterwards does not change what is
 * registered; a stream has at most one allocator, a new registration
 * replaces the old, unregistering a stream without one is no error.
 *
 * Beyond CANN's checks, handles are checked: a description is looked up in
 * the registry of live descriptions (handles.c) before it is touched, and a
 * stream must be a live stream to register for.
 *
 * State: the descriptions' registry, and the per-stream table behind g_mu
 * (this file's; taken after the registry's lock, nothing called under it).
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/hashmap.h"
#include "emu_internal.h"
#include "handles.h"

typedef struct fields {
  aclrtAllocator obj;
  aclrtAllocatorAllocFunc alloc;
  aclrtAllocatorFreeFunc free;
  aclrtAllocatorAllocAdviseFunc advise;
  aclrtAllocatorGetAddrFromBlockFunc addr;
} fields;

typedef struct desc {
  aipc__handle h; /* first: the registry's head */
  fields f;       /* under g_mu */
} desc;

typedef struct registration {
  aclrtAllocatorDesc handle; /* as registered: CANN hands it back as is */
  fields f;                  /* the copy taken at registration */
} registration;

static void release(aipc__handle *h) {
  if (aipc__handle_unref(h)) free(h);
}
static void forget(aipc__handle *h) { free(h); }
static const aipc__handle_ops g_ops = {"allocator description", release, forget, NULL};
static aipc__handles g_descs = AIPC__HANDLES_INIT(&g_ops);

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static aipc__hmap g_by_stream = AIPC__HMAP_INIT; /* {stream, 0} -> registration; under g_mu */

static aipc__hkey hk(const void *p) { return (aipc__hkey){(uint64_t)(uintptr_t)p, 0}; }

aclrtAllocatorDesc aipc__emu_allocator_create_desc(void) {
  const char *call = AIPC_CALL_NAME(allocator_create_desc);
  desc *d = calloc(1, sizeof *d);
  if (!d) {
    (void)aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    return NULL;
  }
  aipc__handle_init(&d->h);
  if (aipc__handles_add(&g_descs, call, &d->h) != ACL_SUCCESS) return NULL;
  return d;
}

aclError aipc__emu_allocator_destroy_desc(aclrtAllocatorDesc allocatorDesc) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_descs, AIPC_CALL_NAME(allocator_destroy_desc), allocatorDesc, &o);
  if (rc) return rc;
  release(o);
  return ACL_SUCCESS;
}

/* Sets one field of a live description (what names it in messages). */
static aclError set_field(const char *call, aclrtAllocatorDesc h, const char *what, const void *value,
                          void (*set)(fields *f, const void *value)) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_descs, call, "allocatorDesc", h, &o);
  if (rc) return rc;
  if (!value) {
    release(o);
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, what);
  }
  pthread_mutex_lock(&g_mu);
  set(&((desc *)o)->f, value);
  pthread_mutex_unlock(&g_mu);
  release(o);
  return ACL_SUCCESS;
}

/* Function pointers travel as the void pointers set_field takes through a
 * union, which C allows where a cast would not. */
typedef union fnptr {
  const void *p;
  aclrtAllocatorAllocFunc alloc;
  aclrtAllocatorFreeFunc free;
  aclrtAllocatorAllocAdviseFunc advise;
  aclrtAllocatorGetAddrFromBlockFunc addr;
} fnptr;

static void set_obj(fields *f, const void *v) { f->obj = (aclrtAllocator)(uintptr_t)v; }
static void set_alloc(fields *f, const void *v) { f->alloc = ((const fnptr *)v)->alloc; }
static void set_free(fields *f, const void *v) { f->free = ((const fnptr *)v)->free; }
static void set_advise(fields *f, const void *v) { f->advise = ((const fnptr *)v)->advise; }
static void set_addr(fields *f, const void *v) { f->addr = ((const fnptr *)v)->addr; }

aclError aipc__emu_allocator_set_obj_to_desc(aclrtAllocatorDesc allocatorDesc, aclrtAllocator allocator) {
  return set_field(AIPC_CALL_NAME(allocator_set_obj_to_desc), allocatorDesc, "allocator", allocator, set_obj);
}

aclError aipc__emu_allocator_set_alloc_func_to_desc(aclrtAllocatorDesc allocatorDesc, aclrtAllocatorAllocFunc func) {
  fnptr u = {.alloc = func};
  return set_field(AIPC_CALL_NAME(allocator_set_alloc_func_to_desc), allocatorDesc, "func", func ? &u : NULL,
                   set_alloc);
}

aclError aipc__emu_allocator_set_free_func_to_desc(aclrtAllocatorDesc allocatorDesc, aclrtAllocatorFreeFunc func) {
  fnptr u = {.free = func};
  return set_field(AIPC_CALL_NAME(allocator_set_free_func_to_desc), allocatorDesc, "func", func ? &u : NULL,
                   set_free);
}

aclError aipc__emu_allocator_set_alloc_advise_func_to_desc(aclrtAllocatorDesc allocatorDesc,
                                                           aclrtAllocatorAllocAdviseFunc func) {
  fnptr u = {.advise = func};
  return set_field(AIPC_CALL_NAME(allocator_set_alloc_advise_func_to_desc), allocatorDesc, "func", func ? &u : NULL,
                   set_advise);
}

aclError aipc__emu_allocator_set_get_addr_from_block_func_to_desc(aclrtAllocatorDesc allocatorDesc,
                                                                  aclrtAllocatorGetAddrFromBlockFunc func) {
  fnptr u = {.addr = func};
  return set_field(AIPC_CALL_NAME(allocator_set_get_addr_from_block_func_to_desc), allocatorDesc, "func",
                   func ? &u : NULL, set_addr);
}

aclError aipc__emu_allocator_register(aclrtStream stream, aclrtAllocatorDesc allocatorDesc) {
  const char *call = AIPC_CALL_NAME(allocator_register);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL (an allocator is registered for a "
                                 "stream the program created)", call);
  int32_t dev;
  aclError rc = aipc__stream_device(call, stream, &dev);
  if (rc) return rc;
  aipc__handle *o;
  if ((rc = aipc__handles_get(&g_descs, call, "allocatorDesc", allocatorDesc, &o))) return rc;
  registration *r = malloc(sizeof *r);
  if (!r) {
    release(o);
    return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  }
  pthread_mutex_lock(&g_mu);
  r->handle = allocatorDesc;
  r->f = ((desc *)o)->f;
  const char *missing = !r->f.obj ? "allocatorDesc->obj (aclrtAllocatorSetObjToDesc)"
                        : !r->f.alloc ? "allocatorDesc->allocFunc (aclrtAllocatorSetAllocFuncToDesc)"
                        : !r->f.free ? "allocatorDesc->freeFunc (aclrtAllocatorSetFreeFuncToDesc)"
                        : !r->f.addr ? "allocatorDesc->getAddrFromBlockFunc (aclrtAllocatorSetGetAddrFromBlockFuncToDesc)"
                                     : NULL;
  registration *old = NULL;
  if (missing) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is not set", call, missing);
  } else {
    old = aipc__hmap_remove(&g_by_stream, hk(stream));
    if (aipc__hmap_put(&g_by_stream, hk(stream), r) != 0)
      rc = aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
    else
      r = NULL;
  }
  pthread_mutex_unlock(&g_mu);
  free(r);
  free(old);
  release(o);
  return rc;
}

aclError aipc__emu_allocator_get_by_stream(aclrtStream stream, aclrtAllocatorDesc *allocatorDesc,
                                           aclrtAllocator *allocator, aclrtAllocatorAllocFunc *allocFunc,
                                           aclrtAllocatorFreeFunc *freeFunc,
                                           aclrtAllocatorAllocAdviseFunc *allocAdviseFunc,
                                           aclrtAllocatorGetAddrFromBlockFunc *getAddrFromBlockFunc) {
  const char *call = AIPC_CALL_NAME(allocator_get_by_stream);
  if (!allocatorDesc) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: allocatorDesc is NULL", call);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  pthread_mutex_lock(&g_mu);
  registration *r = aipc__hmap_get(&g_by_stream, hk(stream));
  registration copy;
  if (r) copy = *r;
  pthread_mutex_unlock(&g_mu);
  if (!r)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream %p is not registered with any allocator", call, stream);
  *allocatorDesc = copy.handle;
  if (allocator) *allocator = copy.f.obj;
  if (allocFunc) *allocFunc = copy.f.alloc;
  if (freeFunc) *freeFunc = copy.f.free;
  if (allocAdviseFunc) *allocAdviseFunc = copy.f.advise;
  if (getAddrFromBlockFunc) *getAddrFromBlockFunc = copy.f.addr;
  return ACL_SUCCESS;
}

aclError aipc__emu_allocator_unregister(aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(allocator_unregister);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  pthread_mutex_lock(&g_mu);
  registration *r = aipc__hmap_remove(&g_by_stream, hk(stream));
  pthread_mutex_unlock(&g_mu);
  free(r); /* none registered: nothing to do, as in CANN */
  return ACL_SUCCESS;
}

/* ---- aclFinalize and fork --------------------------------------------- */

/* g_mu held, or the only thread (a fork child). */
static void clear_registrations(void) {
  aipc__hkey k;
  void *v;
  for (size_t i = 0; aipc__hmap_next(&g_by_stream, &i, &k, &v);) free(v);
  aipc__hmap_clear(&g_by_stream);
}

void aipc__allocator_finalize(void) {
  aipc__handles_finalize(&g_descs);
  pthread_mutex_lock(&g_mu);
  clear_registrations();
  pthread_mutex_unlock(&g_mu);
}

void aipc__allocator_atfork_prepare(void) {
  aipc__handles_atfork_prepare(&g_descs);
  pthread_mutex_lock(&g_mu);
}

void aipc__allocator_atfork_parent(void) {
  pthread_mutex_unlock(&g_mu);
  aipc__handles_atfork_parent(&g_descs);
}

void aipc__allocator_atfork_child(void) {
  g_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  clear_registrations();
  aipc__handles_atfork_child(&g_descs);
}
