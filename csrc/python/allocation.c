/* _Allocation: device memory shared by the objects that use it. */
#include "allocation.h"

#include <stdio.h>
#include <string.h>

/* ---- registry ------------------------------------------------------------ */

/* First index whose base is > addr. */
static size_t registry_upper(const aipc_py_registry *r, uintptr_t addr) {
  size_t lo = 0, hi = r->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)r->items[mid]->base <= addr) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static int registry_add(aipc_py_registry *r, aipc_py_allocation *a) {
  if (r->count == r->capacity) {
    size_t cap = r->capacity ? r->capacity * 2 : 64;
    aipc_py_allocation **items = PyMem_Realloc(r->items, cap * sizeof *items);
    if (items == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    r->items = items;
    r->capacity = cap;
  }
  size_t at = registry_upper(r, (uintptr_t)a->base);
  memmove(&r->items[at + 1], &r->items[at], (r->count - at) * sizeof r->items[0]);
  r->items[at] = a;
  r->count++;
  a->registered = 1;
  return 0;
}

static void registry_remove(aipc_py_registry *r, aipc_py_allocation *a) {
  if (!a->registered) return;
  size_t at = registry_upper(r, (uintptr_t)a->base);
  while (at > 0) {
    at--;
    if (r->items[at] == a) {
      memmove(&r->items[at], &r->items[at + 1], (r->count - at - 1) * sizeof r->items[0]);
      r->count--;
      break;
    }
    if (r->items[at]->base != a->base) break;
  }
  a->registered = 0;
}

/* Usable, and memory of ascend_ipc (not borrowed). */
static int own_usable(const aipc_py_allocation *a) {
  return !a->released && !aipc_py_allocation_foreign(a) /* stale after fork */ && a->kind != AIPC_PY_BORROWED;
}

aipc_py_allocation *aipc_py_registry_find(aipc_py_registry *r, uintptr_t lo, uintptr_t hi) {
  size_t at = registry_upper(r, lo);
  while (at > 0) {
    aipc_py_allocation *a = r->items[--at];
    if (!own_usable(a)) continue;
    uintptr_t base = (uintptr_t)a->base;
    if (lo >= base && hi >= lo && hi <= base + a->size) return a;
    /* Owned and imported allocations of this process never overlap, but for
     * an import of an own key over its exporter's range: the same range. */
    return NULL;
  }
  return NULL;
}

aipc_py_allocation *aipc_py_registry_overlap(aipc_py_registry *r, uintptr_t lo, uintptr_t hi) {
  if (hi <= lo) return NULL;
  /* The own allocation with the greatest base below hi is the only candidate:
   * own allocations do not overlap each other, so any other one ends before
   * it starts. */
  size_t at = registry_upper(r, hi - 1);
  while (at > 0) {
    aipc_py_allocation *a = r->items[--at];
    if (!own_usable(a)) continue;
    return (uintptr_t)a->base + a->size > lo ? a : NULL;
  }
  return NULL;
}

aipc_py_allocation *aipc_py_registry_exporter(aipc_py_registry *r, const char *key, uintptr_t addr) {
  size_t at = registry_upper(r, addr);
  while (at > 0) {
    aipc_py_allocation *a = r->items[--at];
    if (a->released || aipc_py_allocation_foreign(a) || a->kind == AIPC_PY_IMPORTED) continue;
    if (addr < (uintptr_t)a->base + a->size && aipc_py_allocation_export_by_key(a, key) != NULL) return a;
    if (a->kind == AIPC_PY_OWNED) break; /* owned allocations do not overlap: none further down holds addr */
  }
  return NULL;
}

aipc_py_allocation *aipc_py_registry_find_borrowed(aipc_py_registry *r, uintptr_t base, size_t size,
                                                   int32_t device) {
  size_t at = registry_upper(r, base);
  while (at > 0) {
    aipc_py_allocation *a = r->items[--at];
    if ((uintptr_t)a->base != base) break;
    if (a->kind == AIPC_PY_BORROWED && !a->released && !aipc_py_allocation_foreign(a) && a->size == size &&
        a->device == device) {
      return a;
    }
  }
  return NULL;
}

const char *aipc_py_alloc_kind_name(int kind) {
  switch (kind) {
    case AIPC_PY_OWNED:
      return "owned";
    case AIPC_PY_IMPORTED:
      return "imported";
    default:
      return "borrowed";
  }
}

void aipc_py_registry_free(aipc_py_registry *r) {
  /* Allocations still alive (held by objects that outlive the module's
   * state, e.g. at interpreter exit) must not touch the freed array. */
  for (size_t i = 0; i < r->count; i++) r->items[i]->registered = 0;
  PyMem_Free(r->items);
  r->items = NULL;
  r->count = r->capacity = 0;
}

/* ---- exports ------------------------------------------------------------- */

aipc_py_export_rec *aipc_py_allocation_find_export(aipc_py_allocation *a, uint64_t flags, int link) {
  for (size_t i = 0; i < a->nexports; i++) {
    if (a->exports[i].flags == flags && a->exports[i].link == link) return &a->exports[i];
  }
  return NULL;
}

aipc_py_export_rec *aipc_py_allocation_export_by_key(aipc_py_allocation *a, const char *key) {
  for (size_t i = 0; i < a->nexports; i++) {
    if (strcmp(a->exports[i].key, key) == 0) return &a->exports[i];
  }
  return NULL;
}

int aipc_py_allocation_add_export(aipc_py_allocation *a, const char *key, uint64_t flags, int link) {
  if (a->nexports == a->exports_cap) {
    size_t cap = a->exports_cap ? a->exports_cap * 2 : 4;
    aipc_py_export_rec *recs = PyMem_Realloc(a->exports, cap * sizeof *recs);
    if (recs == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    a->exports = recs;
    a->exports_cap = cap;
  }
  aipc_py_export_rec *rec = &a->exports[a->nexports++];
  memset(rec, 0, sizeof *rec);
  memcpy(rec->key, key, strnlen(key, AIPC_PY_KEY_LEN - 1));
  rec->flags = flags;
  rec->link = link;
  return 0;
}

void aipc_py_allocation_remove_export(aipc_py_allocation *a, const char *key) {
  aipc_py_export_rec *rec = aipc_py_allocation_export_by_key(a, key);
  if (rec == NULL) return;
  size_t at = (size_t)(rec - a->exports);
  memmove(&a->exports[at], &a->exports[at + 1], (a->nexports - at - 1) * sizeof *rec);
  a->nexports--;
}

/* ---- lifetime ------------------------------------------------------------ */

aipc_py_allocation *aipc_py_allocation_create(aipc_py_state *st, int kind, void *base, size_t size,
                                              int32_t device, aipc_py_import *import) {
  aipc_py_allocation *a = (aipc_py_allocation *)st->allocation_type->tp_alloc(st->allocation_type, 0);
  if (a == NULL) return NULL;
  a->base = base;
  a->size = size;
  a->device = device;
  a->kind = kind;
  a->pid = aipc_py_pid();
  a->import = import;
  if (registry_add(&st->registry, a) < 0) {
    a->released = 1; /* the caller keeps the memory */
    Py_DECREF(a);
    return NULL;
  }
  return a;
}

int aipc_py_allocation_check(aipc_py_allocation *a, const char *what) {
  if (aipc_py_allocation_foreign(a)) {
    PyErr_Format(PyExc_ValueError,
                 "this %s uses device memory of process %ld, inherited across fork(); a forked child "
                 "does not own its parent's device memory (its runtime starts empty): export it in "
                 "the parent and open the IpcHandle in the child",
                 what, a->pid);
    return -1;
  }
  if (a->released) {
    PyErr_Format(PyExc_ValueError, "this %s's device memory was released", what);
    return -1;
  }
  return 0;
}

typedef struct release_call {
  char (*keys)[AIPC_PY_KEY_LEN]; /* the exports to close, n of them */
  size_t n;
  int kind;
  void *base;
  aipc_py_import *import;
  int final;
  size_t closed;         /* out: how many exports closed (or were left to own imports) */
  aclError rc;           /* out: the first failure, or ACL_SUCCESS */
  aipc_py_failure later; /* out: failures releasing what other, gone objects held */
} release_call;

/* Closes the exports in order, stopping at the first refusal; then, if all
 * closed, gives the memory itself back. */
static void close_and_free(const aipc_provider *p, aipc_py_failure *f, int32_t device, void *arg) {
  release_call *c = arg;
  for (; c->closed < c->n; c->closed++) {
    int deferred; /* an own import of the key still open: it ends the export when it closes */
    c->rc = aipc_py_export_close(p, f, c->keys[c->closed], &deferred);
    if (c->rc != ACL_SUCCESS) return;
  }
  if (c->kind == AIPC_PY_OWNED) {
    c->rc = aipc_py_note(p, f, AIPC_CALL_NAME(free), p->free(c->base));
  } else if (c->kind == AIPC_PY_IMPORTED) {
    c->rc = aipc_py_import_close(p, f, c->import, !c->final, &c->later);
  } /* BORROWED: the memory is its owner's to free */
}

int aipc_py_allocation_release(aipc_py_state *st, aipc_py_allocation *a, aipc_py_failure *f, int final) {
  if (a->released) return 0;
  registry_remove(&st->registry, a);
  if (aipc_py_allocation_foreign(a)) {
    /* The parent's memory: the child's runtime does not know it. */
    a->released = 1;
    return 0;
  }

  size_t n = a->nexports;
  release_call c = {.keys = NULL, .n = n, .kind = a->kind, .base = a->base, .import = a->import, .final = final,
                    .closed = 0, .rc = ACL_SUCCESS, .later = AIPC_PY_FAILURE_INIT};
  /* The keys to close, in memory of this call's own. */
  if (n > 0) {
    c.keys = PyMem_RawMalloc(n * sizeof *c.keys);
    if (c.keys == NULL) {
      snprintf(f->message, sizeof f->message, "out of memory releasing device memory");
      f->code = ACL_ERROR_BAD_ALLOC;
      f->call = AIPC_CALL_NAME(ipc_close);
      if (registry_add(&st->registry, a) < 0) PyErr_Clear();
      return -1;
    }
    for (size_t i = 0; i < n; i++) memcpy(c.keys[i], a->exports[i].key, AIPC_PY_KEY_LEN);
  }

  /* Nobody else can reach `a` while the GIL is released: it is being
   * deallocated, or closed by the last object that held it, and it is out of
   * the registry. */
  (void)aipc_py_call_released(st->provider, f, AIPC_PY_NO_DEVICE, close_and_free, &c);

  PyMem_RawFree(c.keys);
  if (c.later.code != ACL_SUCCESS) aipc_py_warn_leak(st, "an imported mapping closed earlier", &c.later);
  /* Exports that did close are gone either way. */
  if (c.closed > 0) memmove(a->exports, a->exports + c.closed, (n - c.closed) * sizeof *a->exports);
  a->nexports = n - c.closed;
  if (c.rc != ACL_SUCCESS) {
    if (c.kind == AIPC_PY_IMPORTED && final) {
      a->import = NULL; /* stays marked closed: the key's next close retries it */
    }
    if (registry_add(&st->registry, a) < 0) PyErr_Clear(); /* lookups only miss it */
    return -1;
  }
  a->import = NULL; /* freed by the table once the runtime closed it */
  a->released = 1;
  return 0;
}

int aipc_py_allocation_call(aipc_py_state *st, aipc_py_allocation *a, aipc_py_allocation *b,
                            aipc_py_released_fn body, void *arg) {
  Py_ssize_t *busy[AIPC_PY_BUSY_MAX] = {&a->busy, b != NULL ? &b->busy : NULL, NULL};
  return aipc_py_call_counted(st, a->device, busy, body, arg);
}

/* Every busy call holds a reference: refcount - busy == 1 means nobody but
 * the caller and those calls can reach the memory. */
static int last_user(void *arg) {
  aipc_py_allocation *a = arg;
  return Py_REFCNT(a) - a->busy == 1;
}

void aipc_py_allocation_wait(aipc_py_allocation *a) { aipc_py_wait_idle(&a->busy, last_user, a); }

static int allocation_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(((aipc_py_allocation *)self)->exporter);
  Py_VISIT(((aipc_py_allocation *)self)->owner);
  Py_VISIT(((aipc_py_allocation *)self)->sync_event);
  return 0;
}

static int allocation_clear(PyObject *self) { return 0; }

static void allocation_dealloc(PyObject *self) {
  aipc_py_allocation *a = (aipc_py_allocation *)self;
  PyTypeObject *tp = Py_TYPE(self);
  aipc_py_state *st = aipc_py_state_of(tp);
  PyObject *exc_type, *exc_value, *exc_tb;
  PyObject_GC_UnTrack(self);
  PyErr_Fetch(&exc_type, &exc_value, &exc_tb); /* a dealloc never disturbs a pending exception */
  if (!a->released) {
    aipc_py_failure f = AIPC_PY_FAILURE_INIT;
    if (aipc_py_allocation_release(st, a, &f, 1) < 0) {
      /* Never free memory the runtime would not let go of (ASCEND_IPC_STRICT=1
       * with importers still attached): leak it, loudly. */
      registry_remove(&st->registry, a);
      aipc_py_warn_leak(st, a->kind == AIPC_PY_IMPORTED ? "an imported mapping" : "exported device memory",
                        &f);
    }
  }
  registry_remove(&st->registry, a);
  /* After the import closed: the exporter's memory (and its export) outlives it. */
  Py_CLEAR(a->exporter);
  Py_CLEAR(a->owner); /* last: the memory may go with it */
  Py_CLEAR(a->sync_event);
  PyMem_Free(a->exports);
  PyErr_Restore(exc_type, exc_value, exc_tb);
  tp->tp_free(self);
  Py_DECREF(tp);
}

static PyObject *allocation_repr(PyObject *self) {
  aipc_py_allocation *a = (aipc_py_allocation *)self;
  return PyUnicode_FromFormat("<ascend_ipc._C._Allocation %s %p size=%zu device=%d exports=%zu%s%s>",
                              aipc_py_alloc_kind_name(a->kind), a->base, a->size,
                              (int)a->device, a->nexports, a->released ? " released" : "",
                              aipc_py_allocation_foreign(a) ? " foreign" : "");
}

static PyType_Slot allocation_slots[] = {
    {Py_tp_doc, (void *)"Device memory shared by the objects that use it (internal)."},
    {Py_tp_dealloc, allocation_dealloc},
    {Py_tp_traverse, allocation_traverse},
    {Py_tp_clear, allocation_clear},
    {Py_tp_repr, allocation_repr},
    {0, NULL},
};

static PyType_Spec allocation_spec = {
    .name = "ascend_ipc._C._Allocation",
    .basicsize = sizeof(aipc_py_allocation),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = allocation_slots,
};

int aipc_py_allocation_init_type(PyObject *module, aipc_py_state *st) {
  st->allocation_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &allocation_spec, NULL);
  if (st->allocation_type == NULL) return -1;
  return 0;
}
