/*
 * The registry of live handles, one per kind of object (events, notifies,
 * streams, contexts), shared by event.c, notify.c, stream.c and context.c.
 *
 * A handle a caller passes is looked up by its value in the registry of its
 * kind and dereferenced only when found there, so a stale, destroyed,
 * made-up or other-kind handle is an error, never a crash. Objects are
 * reference counted: the registry holds one reference while the handle is
 * live, callers one while they use it, queued work one per task; the last
 * put (the kind's own) frees the object.
 *
 * Ownership: the registry owns its map and lock, never the objects; it
 * calls nothing of its kind's file except the ops that file passes. Its lock
 * is the kind's place in the lock order (event -> notify -> vmm -> IPC layer
 * -> streams -> contexts -> memory): a kind may take it (aipc__handles_lock)
 * to guard a few fields of its own, as event.c and notify.c do for their
 * exports.
 */
#ifndef ASCEND_IPC_EMU_HANDLES_H_
#define ASCEND_IPC_EMU_HANDLES_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "acl/acl.h"
#include "core/hashmap.h"

/* The head of every registered object, its first member: the object's
 * address is its handle. */
typedef struct aipc__handle {
  atomic_int refs;
} aipc__handle;

/* What differs between kinds. Each is called without the registry lock
 * unless it says otherwise. */
typedef struct aipc__handle_ops {
  const char *kind; /* "event": the kind's name in messages */
  /* Drops the registry's reference to an object taken out of it: a failed
   * add, and aipc__handles_finalize. */
  void (*release)(aipc__handle *h);
  /* Fork child: frees what the object holds in this process's memory, and
   * the object, without touching its locks or anything shared. */
  void (*forget)(aipc__handle *h);
  /* Optional. Fork prepare (hold) and parent (!hold), registry lock held:
   * holds the object still so the child copies it consistent. */
  void (*fork_hold)(aipc__handle *h, bool hold);
} aipc__handle_ops;

/* A kind's registry; its fields are handles.c's. */
typedef struct aipc__handles {
  const aipc__handle_ops *ops;
  pthread_mutex_t mu;
  aipc__hmap map; /* handle -> object */
} aipc__handles;

#define AIPC__HANDLES_INIT(ops) {(ops), PTHREAD_MUTEX_INITIALIZER, AIPC__HMAP_INIT}

/* Reference counting: init gives a new object its first reference (the one
 * aipc__handles_add hands to the registry); unref returns true when it
 * dropped the last one, and the caller frees. */
void aipc__handle_init(aipc__handle *h);
void aipc__handle_ref(aipc__handle *h);
bool aipc__handle_unref(aipc__handle *h);

/*
 * Makes h a live handle, the registry taking its first reference. Out of
 * memory: releases h (ops->release) and fails with ACL_ERROR_BAD_ALLOC,
 * "<call>: out of host memory".
 */
aclError aipc__handles_add(aipc__handles *r, const char *call, aipc__handle *h);

/*
 * The live object for handle, with a reference the caller puts back. what
 * names the argument in messages ("event", "startEvent"). Fails with
 * ACL_ERROR_INVALID_PARAM when handle is NULL ("<call>: <what> is NULL") or
 * not a live object of this kind.
 */
aclError aipc__handles_get(aipc__handles *r, const char *call, const char *what, const void *handle,
                           aipc__handle **out);

/* Destroy: as get with what = the kind, but takes the handle out of the
 * registry and gives the caller the registry's reference. */
aclError aipc__handles_remove(aipc__handles *r, const char *call, const void *handle, aipc__handle **out);

/* Takes out one live object that match accepts (match NULL: any) and gives
 * the caller the registry's reference; NULL when none is left. match runs
 * under the registry lock. */
aipc__handle *aipc__handles_take_if(aipc__handles *r, bool (*match)(aipc__handle *h, void *arg), void *arg);

/* aclFinalize: takes out every live object and releases each (ops->release,
 * outside the lock), until none is left. */
void aipc__handles_finalize(aipc__handles *r);

/* For the kind's own fields guarded by the registry lock. */
void aipc__handles_lock(aipc__handles *r);
void aipc__handles_unlock(aipc__handles *r);

/* Fork: prepare takes the lock, then holds every object (ops->fork_hold);
 * parent lets them go, then the lock; the child forgets every object
 * (ops->forget), empties the map and remakes the lock. */
void aipc__handles_atfork_prepare(aipc__handles *r);
void aipc__handles_atfork_parent(aipc__handles *r);
void aipc__handles_atfork_child(aipc__handles *r);

#endif
