/*
 * Labels and model runtime instances (aclmdlRI): task lists recorded from
 * streams and replayed on a stream by aclmdlRIExecuteAsync.
 *
 * Recording. A model records from a stream by becoming its recorder
 * (stream.c, aipc__stream_swap_recorder): every task queued there is handed
 * to record() below instead of the stream's worker. Two ways in:
 *   - build: aclmdlRIBuildBegin, aclmdlRIBindStream (each bound stream gets
 *     a program of its own), tasks, labels (aclrtSetLabel) and switches
 *     (aclrtSwitchLabelByIndex) queued on the bound streams,
 *     aclmdlRIEndTask per stream, aclmdlRIBuildEnd;
 *   - capture: aclmdlRICaptureBegin on a stream makes a model with one
 *     program for it, aclmdlRICaptureEnd hands the model out.
 * A task kind says whether it can be recorded by how it is submitted
 * (emu.h: aipc__stream_submit_recordable with a clone function); others are
 * refused with ACL_ERROR_RT_FEATURE_NOT_SUPPORT naming the call, and a
 * capture they hit is invalidated (aclmdlRICaptureEnd then fails with that
 * error), as in CUDA graphs.
 *
 * Replay. A model with one head stream and no switch (every capture, and
 * straight-line builds) is expanded when aclmdlRIExecuteAsync is called:
 * each template is cloned and the clones queued on the execution stream in
 * order, so they are exactly the tasks the original calls would have queued
 * at that moment (an event record takes its place among records then). Any
 * other model is queued as one task that interprets it when it runs: it
 * runs the head streams' programs side by side (a thread each), cloning and
 * running each template in turn (an event wait then takes its target when
 * reached, so waits between two streams of one model are not ordered); a switch reads its uint32 index from device memory and
 * continues at the chosen label, on whichever program holds it, the
 * current program stopping there (CANN: an index past the last label picks
 * the last). Streams bound with ACL_MODEL_STREAM_FLAG_DEFAULT run only when
 * a switch jumps into them. The first failing task ends the run; the
 * execution stream reports it at aclrtSynchronizeStream.
 *
 * Handles (models, labels, label lists) are checked against registries
 * (handles.c). A model's lifetime: the registry's reference, one per queued
 * execution. A label is an identity only; a model notes where each label
 * was set in it, and aclmdlRIBuildEnd resolves every switch's labels to
 * positions, so destroying labels and lists afterwards changes nothing.
 *
 * Locks: g_mu guards every model's programs, states and the stream table.
 * record() runs under the recording stream's queue lock and takes g_mu:
 * lock order streams -> model, so nothing here calls stream.c or the
 * registries while holding g_mu.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hashmap.h"
#include "emu_internal.h"
#include "handles.h"
#include "os/os.h"

#define MAX_LABELS_IN_LIST 65535u

/* ---- labels and label lists ------------------------------------------- */

typedef struct label {
  aipc__handle h;
} label;

typedef struct label_list {
  aipc__handle h;
  size_t n;
  aclrtLabel labels[]; /* handle values, identities only */
} label_list;

static void release_plain(aipc__handle *h) {
  if (aipc__handle_unref(h)) free(h);
}
static void forget_plain(aipc__handle *h) { free(h); }
static const aipc__handle_ops g_label_ops = {"label", release_plain, forget_plain, NULL};
static const aipc__handle_ops g_list_ops = {"label list", release_plain, forget_plain, NULL};
static aipc__handles g_labels = AIPC__HANDLES_INIT(&g_label_ops);
static aipc__handles g_lists = AIPC__HANDLES_INIT(&g_list_ops);

aclError aipc__emu_create_label(aclrtLabel *out) {
  const char *call = AIPC_CALL_NAME(create_label);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: label is NULL", call);
  label *l = calloc(1, sizeof *l);
  if (!l) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  aipc__handle_init(&l->h);
  aclError rc = aipc__handles_add(&g_labels, call, &l->h);
  if (rc == ACL_SUCCESS) *out = l;
  return rc;
}

aclError aipc__emu_destroy_label(aclrtLabel h) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_labels, AIPC_CALL_NAME(destroy_label), h, &o);
  if (rc == ACL_SUCCESS) release_plain(o);
  return rc;
}

aclError aipc__emu_create_label_list(aclrtLabel *labels, size_t num, aclrtLabelList *out) {
  const char *call = AIPC_CALL_NAME(create_label_list);
  if (!labels) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: labels is NULL", call);
  if (!out) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: labelList is NULL", call);
  if (num == 0 || num > MAX_LABELS_IN_LIST)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: num %zu is out of range (1..%u)", call, num, MAX_LABELS_IN_LIST);
  for (size_t i = 0; i < num; i++) {
    aipc__handle *o;
    char what[32];
    snprintf(what, sizeof what, "labels[%zu]", i);
    aclError rc = aipc__handles_get(&g_labels, call, what, labels[i], &o);
    if (rc) return rc;
    release_plain(o);
  }
  label_list *l = malloc(sizeof *l + num * sizeof(aclrtLabel));
  if (!l) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  aipc__handle_init(&l->h);
  l->n = num;
  memcpy(l->labels, labels, num * sizeof(aclrtLabel));
  aclError rc = aipc__handles_add(&g_lists, call, &l->h);
  if (rc == ACL_SUCCESS) *out = l;
  return rc;
}

aclError aipc__emu_destroy_label_list(aclrtLabelList h) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_lists, AIPC_CALL_NAME(destroy_label_list), h, &o);
  if (rc == ACL_SUCCESS) release_plain(o);
  return rc;
}

/* ---- models ----------------------------------------------------------- */

typedef enum { ST_BUILDING, ST_CAPTURING, ST_BUILT, ST_INVALID } mstate;

typedef struct target {
  size_t prog; /* index in the model's programs */
  size_t pos;  /* the entry the label precedes */
} target;

typedef struct entry {
  aipc__task *tmpl; /* a recorded task (never run itself), or NULL for a switch */
  aipc__task_clone clone;
  /* a switch */
  void *ptr;
  uint32_t max;
  aclrtLabel *labels; /* max of them, from the list */
  target *targets;    /* resolved by aclmdlRIBuildEnd */
  int32_t cur_dev;    /* the calling thread's device, for reading ptr */
} entry;

typedef struct model model;

typedef struct program {
  aipc__recorder rec; /* first: the stream's recorder is the program */
  model *m;
  aclrtStream stream;
  uint32_t flag;      /* ACL_MODEL_STREAM_FLAG_HEAD or _DEFAULT */
  bool bound;         /* the stream still records into it */
  bool ended;         /* aclmdlRIEndTask */
  entry *e;
  size_t n, cap;
} program;
_Static_assert(offsetof(program, rec) == 0, "a program's address is its recorder's");

typedef struct label_at {
  aclrtLabel label;
  target at;
} label_at;

struct model {
  aipc__handle h; /* first: the registry's head */
  mstate state;
  bool dead;      /* aclmdlRIDestroy */
  bool linear;    /* one head program, no switch: replayed by expansion */
  program **progs;
  size_t nprogs;
  label_at *labels;
  size_t nlabels;
  /* capture */
  aclmdlRICaptureMode mode;
  pthread_t capturer;
  aclError capture_err; /* what invalidated it */
  char capture_msg[512];
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static aipc__hmap g_streams = AIPC__HMAP_INIT; /* {stream, 0} -> its bound or capturing program; under g_mu */

static void model_release(aipc__handle *h);
static void model_forget(aipc__handle *h);
static const aipc__handle_ops g_model_ops = {"model runtime instance", model_release, model_forget, NULL};
static aipc__handles g_models = AIPC__HANDLES_INIT(&g_model_ops);

static aipc__hkey hk(const void *p) { return (aipc__hkey){(uint64_t)(uintptr_t)p, 0}; }

/* Drops this thread's pending message: an undo that failed only because its
 * stream is gone is no news to the caller. */
static void clear_error(void) { (void)aipc__recent_err_msg(); }

static const char *msg_or_empty(const char *m) { return m ? m : ""; }

/* Marker tasks: never queued, never run; record() recognises them. */
typedef struct label_marker {
  aipc__task t;
  aclrtLabel label;
} label_marker;

typedef struct switch_marker {
  aipc__task t;
  entry e;
} switch_marker;

static aclError run_marker(aipc__task *t, aclError failed, const _Atomic(bool) *cancel) {
  (void)t, (void)failed, (void)cancel;
  return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "a label or switch marker ran outside a model runtime instance");
}
static aclError run_switch_marker(aipc__task *t, aclError failed, const _Atomic(bool) *cancel) {
  return run_marker(t, failed, cancel);
}
static void free_label_marker(aipc__task *t) { free(t); }
static void free_switch_marker(aipc__task *t) {
  switch_marker *s = (switch_marker *)t;
  free(s->e.labels);
  free(s);
}

static void free_entry(entry *e, bool forget) {
  if (e->tmpl) forget ? free(e->tmpl) : e->tmpl->free(e->tmpl);
  free(e->labels);
  free(e->targets);
}

static void model_free(model *m, bool forget) {
  for (size_t i = 0; i < m->nprogs; i++) {
    program *p = m->progs[i];
    for (size_t j = 0; j < p->n; j++) free_entry(&p->e[j], forget);
    free(p->e);
    free(p);
  }
  free(m->progs);
  free(m->labels);
  free(m);
}

static void model_put(model *m) {
  if (aipc__handle_unref(&m->h)) model_free(m, false);
}

/* A bound or capturing stream holds a reference to its model (taken by
 * bind(), dropped by whoever ends the binding: the swap that unbinds it, or
 * the stream's own end, here). */
static void stream_gone(aipc__recorder *r) {
  program *p = (program *)r;
  model *m = p->m;
  pthread_mutex_lock(&g_mu);
  if (p->bound) {
    p->bound = false;
    if (aipc__hmap_get(&g_streams, hk(p->stream)) == p) aipc__hmap_remove(&g_streams, hk(p->stream));
  }
  pthread_mutex_unlock(&g_mu);
  model_put(m);
}

/* Ends one binding: p's stream stops recording into it. The swap takes the
 * stream's lock (before g_mu in the lock order), so it runs without g_mu.
 * When the stream is gone (destroyed, its end called stream_gone, or about
 * to), nothing is left to undo. */
static void unbind_stream(const char *call, program *p) {
  bool swapped = false;
  if (aipc__stream_swap_recorder(call, p->stream, &p->rec, NULL, &swapped) != ACL_SUCCESS) clear_error();
  if (swapped) model_put(p->m);
}

/* Ends every binding of m (unbind: the streams stop recording into it),
 * one at a time: the swap takes the stream's lock, which comes before
 * g_mu, so it runs with g_mu released. Called without g_mu. */
static void unbind_all(model *m) {
  pthread_mutex_lock(&g_mu);
  m->dead = true;
  for (;;) {
    program *p = NULL;
    for (size_t i = 0; i < m->nprogs && !p; i++)
      if (m->progs[i]->bound) p = m->progs[i];
    if (!p) break;
    p->bound = false;
    if (aipc__hmap_get(&g_streams, hk(p->stream)) == p) aipc__hmap_remove(&g_streams, hk(p->stream));
    pthread_mutex_unlock(&g_mu);
    unbind_stream("aclmdlRIDestroy", p);
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
}

/* The registry's reference, dropped (aclFinalize, a failed add). */
static void model_release(aipc__handle *h) {
  model *m = (model *)h;
  unbind_all(m);
  model_put(m);
}

/* Fork child: the streams are gone; free what the parent's model holds here. */
static void model_forget(aipc__handle *h) { model_free((model *)h, true); }

static aclError get_model(const char *call, aclmdlRI h, model **out) {
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_models, call, "modelRI", h, &o);
  if (rc == ACL_SUCCESS) *out = (model *)o;
  return rc;
}

static program *program_new(model *m, aclrtStream stream, uint32_t flag);

/* record(): the stream's tasks come here. Stream queue lock held. */
static aclError record(aipc__recorder *r, const char *call, aipc__task *t, aipc__task_clone clone) {
  program *p = (program *)r;
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g_mu);
  model *m = p->m;
  bool is_label = t->run == run_marker, is_switch = t->run == run_switch_marker;
  if (!p->bound) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL, "%s: stream %p is no longer bound to a model runtime instance", call,
                    p->stream);
  } else if (m->state == ST_INVALID) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                    "%s: the capture on stream %p was invalidated earlier: %s", call, p->stream, m->capture_msg);
  } else if (m->state == ST_BUILT) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: stream %p is bound to a model runtime instance that is built (aclmdlRIBuildEnd): no task "
                    "can be added to it; unbind the stream (aclmdlRIUnbindStream) first",
                    call, p->stream);
  } else if (p->ended) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM,
                    "%s: stream %p: its tasks were ended with aclmdlRIEndTask; no task can follow", call, p->stream);
  } else if ((is_label || is_switch) && m->state == ST_CAPTURING) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL,
                    "%s: stream %p is being captured; labels and switches need a stream bound with aclmdlRIBindStream",
                    call, p->stream);
  } else if (is_label) {
    aclrtLabel l = ((label_marker *)t)->label;
    for (size_t i = 0; i < m->nlabels && rc == ACL_SUCCESS; i++)
      if (m->labels[i].label == l)
        rc = aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: label %p is already set in this model runtime instance",
                        call, l);
    if (rc == ACL_SUCCESS) {
      label_at *a = realloc(m->labels, (m->nlabels + 1) * sizeof *a);
      size_t idx = 0;
      while (m->progs[idx] != p) idx++;
      if (!a)
        rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
      else {
        m->labels = a;
        a[m->nlabels++] = (label_at){l, {idx, p->n}};
      }
    }
  } else if (!is_switch && !clone) {
    rc = aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    "%s: this task cannot be recorded into a model runtime instance: the emulator records copies, "
                    "memsets, event records and waits, labels and switches%s",
                    call, m->state == ST_CAPTURING ? " (the capture is invalidated)" : "");
    if (m->state == ST_CAPTURING) {
      m->state = ST_INVALID;
      m->capture_err = rc;
      snprintf(m->capture_msg, sizeof m->capture_msg, "%s", msg_or_empty(aipc__recent_err_msg()));
      (void)aipc__fail(rc, "%s", m->capture_msg);
    }
  } else {
    if (p->n == p->cap) {
      size_t cap = p->cap ? 2 * p->cap : 8;
      entry *e = realloc(p->e, cap * sizeof *e);
      if (!e) rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
      else p->e = e, p->cap = cap;
    }
    if (rc == ACL_SUCCESS) {
      if (is_switch) {
        switch_marker *s = (switch_marker *)t;
        p->e[p->n++] = s->e;
        s->e.labels = NULL; /* moved */
      } else {
        p->e[p->n++] = (entry){t, clone, NULL, 0, NULL, NULL, 0};
        t = NULL; /* kept as a template */
      }
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (t) t->free(t);
  return rc;
}

static program *program_new(model *m, aclrtStream stream, uint32_t flag) {
  program *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->rec.record = record;
  p->rec.release = stream_gone;
  p->m = m;
  p->stream = stream;
  p->flag = flag;
  return p;
}

/* Adds p to m's programs. g_mu held. */
static bool add_program(model *m, program *p) {
  program **a = realloc(m->progs, (m->nprogs + 1) * sizeof *a);
  if (!a) return false;
  m->progs = a;
  a[m->nprogs++] = p;
  return true;
}

static aclError model_new(const char *call, mstate state, model **out) {
  model *m = calloc(1, sizeof *m);
  if (!m) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  aipc__handle_init(&m->h);
  m->state = state;
  aipc__handle_ref(&m->h); /* the caller's, besides the registry's */
  aclError rc = aipc__handles_add(&g_models, call, &m->h);
  if (rc) {
    model_put(m);
    return rc;
  }
  *out = m;
  return ACL_SUCCESS;
}

/* Makes p its stream's recorder and the stream's entry in g_streams; false
 * (nothing changed) when the stream records for someone already. */
static aclError bind(const char *call, model *m, program *p, mstate want) {
  bool swapped = false;
  aipc__handle_ref(&m->h); /* the stream's, while it records into m */
  aclError rc = aipc__stream_swap_recorder(call, p->stream, NULL, &p->rec, &swapped);
  if (rc == ACL_SUCCESS && !swapped) model_put(m);
  if (rc) {
    model_put(m);
    return rc;
  }
  if (!swapped) {
    pthread_mutex_lock(&g_mu);
    program *o = aipc__hmap_get(&g_streams, hk(p->stream));
    bool capturing = o && o->bound && (o->m->state == ST_CAPTURING || o->m->state == ST_INVALID);
    pthread_mutex_unlock(&g_mu);
    if (capturing)
      return aipc__fail(ACL_ERROR_RT_STREAM_CAPTURED, "%s: stream %p is being captured (aclmdlRICaptureBegin)", call,
                        p->stream);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: stream %p is already bound to a model runtime instance (one stream, one model)", call,
                      p->stream);
  }
  pthread_mutex_lock(&g_mu);
  if (m->dead || m->state != want) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the model runtime instance is %s", call,
                    m->dead ? "destroyed" : m->state == ST_BUILT ? "built already (aclmdlRIBuildEnd)"
                                                                 : "a capture's, not one being built");
  } else {
    program *stale = aipc__hmap_remove(&g_streams, hk(p->stream));
    if (stale) stale->bound = false; /* a destroyed stream's, whose address came back */
    p->bound = true;
    if (aipc__hmap_put(&g_streams, hk(p->stream), p) != 0 || !add_program(m, p)) {
      aipc__hmap_remove(&g_streams, hk(p->stream));
      p->bound = false;
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (rc) { /* undone; the message stays the one above */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", msg_or_empty(aipc__recent_err_msg()));
    unbind_stream(call, p);
    (void)aipc__fail(rc, "%s", msg);
  }
  return rc;
}

aclError aipc__emu_mdl_ri_build_begin(aclmdlRI *modelRI, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(mdl_ri_build_begin);
  if (!modelRI) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: modelRI is NULL", call);
  if (flag != 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: flag %u is reserved: pass 0", call, flag);
  model *m = NULL;
  aclError rc = model_new(call, ST_BUILDING, &m);
  if (rc) return rc;
  *modelRI = m;
  model_put(m);
  return ACL_SUCCESS;
}

aclError aipc__emu_mdl_ri_bind_stream(aclmdlRI modelRI, aclrtStream stream, uint32_t flag) {
  const char *call = AIPC_CALL_NAME(mdl_ri_bind_stream);
  model *m;
  aclError rc = get_model(call, modelRI, &m);
  if (rc) return rc;
  if (!stream) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: stream is NULL (the default stream cannot be bound)", call);
  } else if (flag != ACL_MODEL_STREAM_FLAG_HEAD && flag != ACL_MODEL_STREAM_FLAG_DEFAULT) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                    "%s: flag 0x%x is not ACL_MODEL_STREAM_FLAG_HEAD (0) or ACL_MODEL_STREAM_FLAG_DEFAULT "
                    "(0x7fffffff)",
                    call, flag);
  } else {
    program *p = program_new(m, stream, flag);
    if (!p)
      rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
    else if ((rc = bind(call, m, p, ST_BUILDING)))
      free(p);
  }
  model_put(m);
  return rc;
}

/* m's bound program of stream, or NULL. g_mu held. */
static program *bound_program(model *m, aclrtStream stream) {
  for (size_t i = 0; i < m->nprogs; i++)
    if (m->progs[i]->bound && m->progs[i]->stream == stream) return m->progs[i];
  return NULL;
}

aclError aipc__emu_mdl_ri_end_task(aclmdlRI modelRI, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(mdl_ri_end_task);
  model *m;
  aclError rc = get_model(call, modelRI, &m);
  if (rc) return rc;
  pthread_mutex_lock(&g_mu);
  program *p = stream ? bound_program(m, stream) : NULL;
  if (!p)
    rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL, "%s: stream %p is not bound to this model runtime instance", call,
                    stream);
  else if (m->state != ST_BUILDING)
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the model runtime instance is not being built", call);
  else
    p->ended = true;
  pthread_mutex_unlock(&g_mu);
  model_put(m);
  return rc;
}

/* Resolves every switch of m to positions. g_mu held. */
static aclError resolve(const char *call, model *m) {
  for (size_t i = 0; i < m->nprogs; i++) {
    program *p = m->progs[i];
    for (size_t j = 0; j < p->n; j++) {
      entry *e = &p->e[j];
      if (e->tmpl) continue;
      free(e->targets);
      e->targets = malloc(e->max * sizeof *e->targets);
      if (!e->targets) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
      for (uint32_t k = 0; k < e->max; k++) {
        size_t f = 0;
        while (f < m->nlabels && m->labels[f].label != e->labels[k]) f++;
        if (f == m->nlabels)
          return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR,
                            "%s: label %p (index %u of a switch's label list) is not set on any stream of this model "
                            "runtime instance (aclrtSetLabel)",
                            call, e->labels[k], k);
        e->targets[k] = m->labels[f].at;
      }
    }
  }
  return ACL_SUCCESS;
}

aclError aipc__emu_mdl_ri_build_end(aclmdlRI modelRI, void *reserve) {
  const char *call = AIPC_CALL_NAME(mdl_ri_build_end);
  model *m;
  aclError rc = get_model(call, modelRI, &m);
  if (rc) return rc;
  pthread_mutex_lock(&g_mu);
  size_t heads = 0;
  bool switches = false;
  for (size_t i = 0; i < m->nprogs; i++) {
    if (m->progs[i]->flag == ACL_MODEL_STREAM_FLAG_HEAD) heads++;
    for (size_t j = 0; j < m->progs[i]->n; j++) switches |= m->progs[i]->e[j].tmpl == NULL;
  }
  if (reserve) {
    rc = aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: reserve is reserved: pass NULL", call);
  } else if (m->state != ST_BUILDING) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the model runtime instance is not being built (%s)", call,
                    m->state == ST_BUILT ? "built already" : "a capture");
  } else if (heads == 0) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL,
                    "%s: no stream is bound with ACL_MODEL_STREAM_FLAG_HEAD: nothing would run (aclmdlRIBindStream)",
                    call);
  } else if ((rc = resolve(call, m)) == ACL_SUCCESS) {
    m->state = ST_BUILT;
    m->linear = heads == 1 && m->nprogs == 1 && !switches;
  }
  pthread_mutex_unlock(&g_mu);
  model_put(m);
  return rc;
}

aclError aipc__emu_mdl_ri_unbind_stream(aclmdlRI modelRI, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(mdl_ri_unbind_stream);
  model *m;
  aclError rc = get_model(call, modelRI, &m);
  if (rc) return rc;
  pthread_mutex_lock(&g_mu);
  program *p = stream ? bound_program(m, stream) : NULL;
  if (!p || m->state == ST_CAPTURING || m->state == ST_INVALID) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_MODEL, "%s: stream %p is not bound to this model runtime instance%s", call,
                    stream, p ? " (it is being captured: end it with aclmdlRICaptureEnd)" : "");
    p = NULL;
  } else {
    p->bound = false;
    aipc__hmap_remove(&g_streams, hk(stream));
  }
  pthread_mutex_unlock(&g_mu);
  if (p) unbind_stream(call, p);
  model_put(m);
  return rc;
}

aclError aipc__emu_mdl_ri_destroy(aclmdlRI modelRI) {
  aipc__handle *o;
  aclError rc = aipc__handles_remove(&g_models, AIPC_CALL_NAME(mdl_ri_destroy), modelRI, &o);
  if (rc) return rc;
  model_release(o); /* queued executions keep it until they have run */
  return ACL_SUCCESS;
}

/* ---- execution -------------------------------------------------------- */

typedef struct run_task {
  aipc__task t;
  model *m;
} run_task;

/* Reads a switch's index. */
static aclError switch_index(const entry *e, uint32_t *out) {
  uint32_t idx = 0;
  aclError rc = aipc__mem_copy("aclrtSwitchLabelByIndex (running in aclmdlRIExecuteAsync)", &idx, sizeof idx, e->ptr,
                               sizeof idx, ACL_MEMCPY_DEVICE_TO_HOST, e->cur_dev, true);
  if (rc) return rc;
  *out = idx < e->max ? idx : e->max - 1; /* CANN: past the end, the last label */
  return ACL_SUCCESS;
}

/* Runs program pi of m from pos, following switches. */
static aclError run_program(model *m, size_t pi, size_t pos, aclError failed, const _Atomic(bool) *cancel) {
  const char *call = "aclmdlRIExecuteAsync (running on the stream)";
  for (;;) {
    program *p = m->progs[pi];
    if (pos >= p->n) return ACL_SUCCESS;
    entry *e = &p->e[pos];
    if (e->tmpl) {
      aipc__task *x = NULL;
      aclError rc = e->clone(e->tmpl, call, &x);
      if (rc) return rc;
      if (x) {
        rc = x->run(x, failed, cancel);
        x->free(x);
        if (rc) return rc;
      }
      pos++;
      continue;
    }
    if (atomic_load(cancel))
      return aipc__fail(ACL_ERROR_RT_INTERNAL_ERROR, "%s: the stream was destroyed while the model ran", call);
    uint32_t idx;
    aclError rc = switch_index(e, &idx);
    if (rc) return rc;
    pi = e->targets[idx].prog; /* the current program stops here */
    pos = e->targets[idx].pos;
  }
}

/* One head stream's run, on a thread of its own when the model has several. */
typedef struct head_run {
  model *m;
  size_t prog;
  const _Atomic(bool) *cancel;
  aclError rc;
  char msg[512];
  pthread_t thread;
  bool started;
} head_run;

static void *run_head(void *arg) {
  head_run *h = arg;
  h->rc = run_program(h->m, h->prog, 0, ACL_SUCCESS, h->cancel);
  if (h->rc) snprintf(h->msg, sizeof h->msg, "%s", msg_or_empty(aipc__recent_err_msg()));
  return NULL;
}

/* The head streams run side by side, as a model's streams do on a device
 * (one may wait on an event another records); the first error in bind
 * order is the run's. */
static aclError run_model(aipc__task *t, aclError failed, const _Atomic(bool) *cancel) {
  model *m = ((run_task *)t)->m;
  if (failed) return ACL_SUCCESS; /* skipped, as copies are after an error (stream.c) */
  size_t n = 0;
  for (size_t i = 0; i < m->nprogs; i++) n += m->progs[i]->flag == ACL_MODEL_STREAM_FLAG_HEAD;
  head_run *h = calloc(n, sizeof *h);
  if (!h) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclmdlRIExecuteAsync (running): out of host memory");
  for (size_t i = 0, k = 0; i < m->nprogs; i++)
    if (m->progs[i]->flag == ACL_MODEL_STREAM_FLAG_HEAD) {
      h[k].m = m; /* calloc: no error, no thread yet */
      h[k].prog = i;
      h[k++].cancel = cancel;
    }
  for (size_t k = 1; k < n; k++) /* the first runs here; a thread that cannot start runs here too, after */
    h[k].started = aipc__os_thread_start(&h[k].thread, run_head, &h[k]) == 0;
  run_head(&h[0]);
  for (size_t k = 1; k < n; k++) {
    if (h[k].started)
      pthread_join(h[k].thread, NULL);
    else
      run_head(&h[k]);
  }
  aclError rc = ACL_SUCCESS;
  for (size_t k = 0; k < n && rc == ACL_SUCCESS; k++)
    if (h[k].rc) rc = aipc__fail(h[k].rc, "%s", h[k].msg);
  free(h);
  return rc;
}

static void free_run(aipc__task *t) {
  model_put(((run_task *)t)->m);
  free(t);
}

aclError aipc__emu_mdl_ri_execute_async(aclmdlRI modelRI, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(mdl_ri_execute_async);
  model *m;
  aclError rc = get_model(call, modelRI, &m);
  if (rc) return rc;
  int32_t dev;
  if ((rc = aipc__stream_device(call, stream, &dev))) {
    model_put(m);
    return rc;
  }
  pthread_mutex_lock(&g_mu);
  bool built = m->state == ST_BUILT;
  program *on = stream ? aipc__hmap_get(&g_streams, hk(stream)) : NULL;
  if (on && !on->bound) on = NULL;
  bool capturing = on && (on->m->state == ST_CAPTURING || on->m->state == ST_INVALID);
  pthread_mutex_unlock(&g_mu);
  if (!built || on) {
    model_put(m);
    if (capturing)
      return aipc__fail(ACL_ERROR_RT_STREAM_CAPTURED, "%s: stream %p is being captured: a model cannot run on it",
                        call, stream);
    if (on)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                        "%s: stream %p is bound to a model runtime instance (aclmdlRIBindStream): execute on another "
                        "stream",
                        call, stream);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: the model runtime instance is not built yet (aclmdlRIBuildEnd or aclmdlRICaptureEnd)", call);
  }
  /* Built: its programs no longer change, so they are read without g_mu. */
  if (m->linear) {
    program *p = m->progs[0];
    for (size_t i = 0; i < p->n && rc == ACL_SUCCESS; i++) {
      aipc__task *x = NULL;
      rc = p->e[i].clone(p->e[i].tmpl, call, &x);
      if (rc == ACL_SUCCESS && x) rc = aipc__stream_submit_recordable(call, stream, x, p->e[i].clone);
    }
    model_put(m);
    return rc;
  }
  run_task *r = malloc(sizeof *r);
  if (!r) {
    model_put(m);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  }
  *r = (run_task){{NULL, run_model, free_run, NULL}, m}; /* takes the reference */
  return aipc__stream_submit(call, stream, &r->t);
}

/* ---- labels and switches on a stream ------------------------------------ */

aclError aipc__emu_set_label(aclrtLabel h, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(set_label);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_labels, call, "label", h, &o);
  if (rc) return rc;
  release_plain(o);
  label_marker *l = malloc(sizeof *l);
  if (!l) return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  *l = (label_marker){{NULL, run_marker, free_label_marker, NULL}, h};
  return aipc__stream_submit_record_only(call, stream, &l->t);
}

aclError aipc__emu_switch_label_by_index(void *ptr, uint32_t maxValue, aclrtLabelList labelList, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(switch_label_by_index);
  if (!ptr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: ptr is NULL", call);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  aipc__handle *o;
  aclError rc = aipc__handles_get(&g_lists, call, "labelList", labelList, &o);
  if (rc) return rc;
  label_list *l = (label_list *)o;
  if (maxValue == 0 || maxValue > l->n) {
    size_t n = l->n;
    release_plain(o);
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: maxValue %u: the label list holds %zu labels (1..%zu)", call,
                      maxValue, n, n);
  }
  int32_t cur = aipc__device_current();
  uint32_t probe;
  rc = aipc__mem_copy_check(call, &probe, sizeof probe, ptr, sizeof probe, ACL_MEMCPY_DEVICE_TO_HOST, cur, true);
  switch_marker *s = rc ? NULL : malloc(sizeof *s);
  aclrtLabel *labels = s ? malloc(maxValue * sizeof *labels) : NULL;
  if (labels) memcpy(labels, l->labels, maxValue * sizeof *labels);
  release_plain(o);
  if (rc)
    return aipc__fail(rc, "%s: ptr must hold the uint32 index in device memory: %s", call,
                      msg_or_empty(aipc__recent_err_msg()));
  if (!labels) {
    free(s);
    return aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  }
  *s = (switch_marker){{NULL, run_switch_marker, free_switch_marker, NULL}, {NULL, NULL, ptr, maxValue, labels, NULL, cur}};
  return aipc__stream_submit_record_only(call, stream, &s->t);
}

/* ---- capture ---------------------------------------------------------- */

aclError aipc__emu_mdl_ri_capture_begin(aclrtStream stream, aclmdlRICaptureMode mode) {
  const char *call = AIPC_CALL_NAME(mdl_ri_capture_begin);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL (the default stream cannot be captured)",
                                 call);
  if ((unsigned)mode > ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: mode %d is not an aclmdlRICaptureMode (0..2)", call, (int)mode);
  int32_t dev;
  aclError rc = aipc__stream_device(call, stream, &dev);
  if (rc) return rc;
  model *m = NULL;
  if ((rc = model_new(call, ST_CAPTURING, &m))) return rc;
  m->mode = mode;
  m->capturer = pthread_self();
  program *p = program_new(m, stream, ACL_MODEL_STREAM_FLAG_HEAD);
  if (!p)
    rc = aipc__fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", call);
  else if ((rc = bind(call, m, p, ST_CAPTURING)))
    free(p);
  if (rc) { /* take it out again; nobody saw it */
    aipc__handle *o;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", msg_or_empty(aipc__recent_err_msg()));
    if (aipc__handles_remove(&g_models, call, m, &o) == ACL_SUCCESS) model_release(o);
    (void)aipc__fail(rc, "%s", msg);
  }
  model_put(m);
  return rc;
}

aclError aipc__emu_mdl_ri_capture_get_info(aclrtStream stream, aclmdlRICaptureStatus *status, aclmdlRI *modelRI) {
  const char *call = AIPC_CALL_NAME(mdl_ri_capture_get_info);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  if (!status && !modelRI)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: status and modelRI are both NULL (one may be)", call);
  int32_t dev;
  aclError rc = aipc__stream_device(call, stream, &dev);
  if (rc) return rc;
  pthread_mutex_lock(&g_mu);
  program *p = stream ? aipc__hmap_get(&g_streams, hk(stream)) : NULL;
  model *m = p && p->bound ? p->m : NULL;
  aclmdlRICaptureStatus st = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  if (m && m->state == ST_CAPTURING) st = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
  if (m && m->state == ST_INVALID) st = ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED;
  pthread_mutex_unlock(&g_mu);
  if (status) *status = st;
  if (modelRI) *modelRI = st == ACL_MODEL_RI_CAPTURE_STATUS_NONE ? NULL : m;
  return ACL_SUCCESS;
}

aclError aipc__emu_mdl_ri_capture_end(aclrtStream stream, aclmdlRI *modelRI) {
  const char *call = AIPC_CALL_NAME(mdl_ri_capture_end);
  if (!stream) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", call);
  if (!modelRI) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: modelRI is NULL", call);
  aclError rc = ACL_SUCCESS;
  pthread_mutex_lock(&g_mu);
  program *p = aipc__hmap_get(&g_streams, hk(stream));
  model *m = p && p->bound ? p->m : NULL;
  if (!m || (m->state != ST_CAPTURING && m->state != ST_INVALID)) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, "%s: stream %p is not being captured (aclmdlRICaptureBegin)",
                    call, stream);
    m = NULL;
  } else if (m->mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED && !pthread_equal(m->capturer, pthread_self())) {
    rc = aipc__fail(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
                    "%s: the capture began in another thread in mode %s: end it there (or capture in "
                    "ACL_MODEL_RI_CAPTURE_MODE_RELAXED)",
                    call, m->mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL ? "GLOBAL" : "THREAD_LOCAL");
    m = NULL;
  } else {
    p->bound = false;
    aipc__hmap_remove(&g_streams, hk(stream));
    if (m->state == ST_CAPTURING) {
      m->state = ST_BUILT;
      m->linear = true;
    } else {
      rc = aipc__fail(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "%s: the capture was invalidated: %s", call,
                      m->capture_msg);
    }
    aipc__handle_ref(&m->h);
  }
  pthread_mutex_unlock(&g_mu);
  if (!m) return rc;
  char msg[512] = "";
  if (rc) snprintf(msg, sizeof msg, "%s", msg_or_empty(aipc__recent_err_msg()));
  unbind_stream(call, p);
  if (rc == ACL_SUCCESS) {
    *modelRI = m;
  } else { /* an invalidated capture leaves nothing behind */
    aipc__handle *o;
    if (aipc__handles_remove(&g_models, call, m, &o) == ACL_SUCCESS) model_release(o);
    (void)aipc__fail(rc, "%s", msg);
  }
  model_put(m);
  return rc;
}

/* ---- aclFinalize and fork --------------------------------------------- */

void aipc__model_finalize(void) {
  aipc__handles_finalize(&g_models);
  aipc__handles_finalize(&g_lists);
  aipc__handles_finalize(&g_labels);
  pthread_mutex_lock(&g_mu);
  aipc__hmap_clear(&g_streams);
  pthread_mutex_unlock(&g_mu);
}

void aipc__model_atfork_prepare(void) {
  aipc__handles_atfork_prepare(&g_models);
  aipc__handles_atfork_prepare(&g_lists);
  aipc__handles_atfork_prepare(&g_labels);
  pthread_mutex_lock(&g_mu);
}

void aipc__model_atfork_parent(void) {
  pthread_mutex_unlock(&g_mu);
  aipc__handles_atfork_parent(&g_labels);
  aipc__handles_atfork_parent(&g_lists);
  aipc__handles_atfork_parent(&g_models);
}

void aipc__model_atfork_child(void) {
  g_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  aipc__hmap_clear(&g_streams);
  aipc__handles_atfork_child(&g_labels);
  aipc__handles_atfork_child(&g_lists);
  aipc__handles_atfork_child(&g_models);
}
