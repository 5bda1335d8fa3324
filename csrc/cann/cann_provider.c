/*
 * The cann provider: libascendcl.so loaded with dlopen, its entry points
 * placed in the provider table (see cann_provider.h for the search order).
 *
 * The table entries are the library's own functions wherever the signatures
 * allow, so a call costs one indirect jump. The entries, the stubs and the
 * dlsym table are generated from core/calls.h. These are wrappers:
 *   init               aclInit once per process; a repeated initialisation
 *                      (another component such as torch_npu came first)
 *                      counts as success;
 *   get_recent_err_msg the message of a failure made here (a missing
 *                      symbol, a failed aclInit), else the library's own;
 *   a missing call     fails with ACL_ERROR_FEATURE_UNSUPPORTED and says
 *                      which symbol is missing and which CANN has it (a
 *                      missing aclGetRecentErrMsg just means no messages).
 * The provider's state is one struct, the table's private_data.
 */
#define _GNU_SOURCE /* dladdr */
#include "cann_provider.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define LIB_NAME "libascendcl.so"
#define DEFAULT_TOOLKIT "/usr/local/Ascend/ascend-toolkit/latest"
#define ERR_MAX 4096
#define VERSION_MAX 128

typedef void (*any_fn)(void); /* a function pointer of any type, as stored */
_Static_assert(sizeof(any_fn) == sizeof(void *), "function and data pointers differ in size");

/* ---- state ------------------------------------------------------------------ */

#define MAX_MISSING AIPC_CALL_COUNT /* every call of the list may be missing */

/* Everything the provider knows, reached through its table's private_data.
 * Written once, under load_once (version: under version_once; aclInit's
 * outcome: under init_mutex). */
typedef struct cann_state {
  void *lib;
  char lib_path[PATH_MAX];
  aclError (*real_init)(const char *configPath);
  aipc_cstr (*real_recent_err_msg)(void);
  const char *missing_names[MAX_MISSING];
  const char *missing_since[MAX_MISSING];
  size_t n_missing;
  char version[VERSION_MAX];
  const char *version_source;
  aipc_provider_report report;
  pthread_mutex_t init_mutex;
  int init_done;
  aclError init_rc;
  char init_message[1024];
} cann_state;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static cann_state state = {.init_mutex = PTHREAD_MUTEX_INITIALIZER};
static aipc_provider table = {.private_data = &state};
static const aipc_provider *loaded; /* &table after a successful load */
static char load_error[ERR_MAX + 512]; /* the paths tried, and advice */

/* The provider's state, as every entry reaches it. */
static cann_state *self(void) { return table.private_data; }

/* ---- messages ------------------------------------------------------------ */

/* Appends to a fixed buffer, truncating silently. */
static void appendf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...) {
  size_t used = strnlen(buf, cap);
  if (used + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, cap - used, fmt, ap);
  va_end(ap);
}

/* The library's pending message, consumed; NULL if none. */
static const char *take_library_message(void) {
  if (self()->real_recent_err_msg == NULL) return NULL;
  const char *m = self()->real_recent_err_msg();
  return (m != NULL && m[0] != '\0') ? m : NULL;
}

static const char *cann_recent_err_msg(void) {
  /* Consume both, so neither shows up stale with a later failure. */
  const char *ours = aipc__recent_err_msg();
  const char *theirs = take_library_message();
  return ours != NULL ? ours : theirs;
}

/* ---- missing calls ------------------------------------------------------- */

static const char *cann_version(void);
static const aipc_provider_report *cann_report(void);

static aclError missing_call(const char *symbol, const char *since) {
  return aipc__fail(ACL_ERROR_FEATURE_UNSUPPORTED,
                    "%s is not available: %.300s (CANN %s) does not export it; %s%s%s", symbol, self()->lib_path,
                    cann_version(), since != NULL ? "it is in " : "it needs a newer CANN",
                    since != NULL ? since : "", since != NULL ? " and newer" : "");
}

/* What a stub returns, by the call's return type: a missing call fails with
 * a message; a library without messages simply has none. */
#define MISSING_RESULT_aclError(symbol, since) missing_call(symbol, since)
#define MISSING_RESULT_aipc_cstr(symbol, since) NULL
#define MISSING_RESULT_aipc_stream_config_ptr(symbol, since) ((void)missing_call(symbol, since), NULL)
/* The exception-info getters: CANN's value for "no such information". */
#define MISSING_RESULT_uint32_t(symbol, since) ((void)missing_call(symbol, since), 0xFFFFFFFFu)
/* A handle-returning call says why in the message and returns NULL, as CANN does on failure. */
#define MISSING_RESULT_aclrtAllocatorDesc(symbol, since) ((void)missing_call(symbol, since), (aclrtAllocatorDesc)NULL)

/* One stub per call of core/calls.h, used where the library lacks it. */
#define STUB_(ret, symbol, field, params, args, since, need) \
  static ret stub_##field params { return MISSING_RESULT_##ret(#symbol, since); }
AIPC_CALLS(STUB_)
#undef STUB_

/* ---- aclInit, once ------------------------------------------------------- */

static aclError cann_init(const char *configPath) {
  cann_state *st = self();
  pthread_mutex_lock(&st->init_mutex);
  if (!st->init_done) {
    aclError rc = st->real_init(configPath);
    const char *m = take_library_message();
    if (rc == AIPC_CANN_ERROR_REPEAT_INITIALIZE) rc = ACL_SUCCESS; /* someone else initialised it */
    if (rc != ACL_SUCCESS) {
      snprintf(st->init_message, sizeof st->init_message, "aclInit of %.300s failed with %d: %.600s", st->lib_path,
               (int)rc, m != NULL ? m : "(the library gave no message)");
    }
    st->init_rc = rc;
    st->init_done = 1;
  }
  aclError rc = st->init_rc;
  pthread_mutex_unlock(&st->init_mutex);
  if (rc != ACL_SUCCESS) return aipc__fail(rc, "%s", st->init_message);
  return ACL_SUCCESS;
}

/* ---- the symbol table ------------------------------------------------------ */

enum { REQUIRED, OPTIONAL };

typedef struct entry {
  const char *symbol;
  size_t offset;     /* of the field in aipc_provider */
  any_fn stub;       /* used when the symbol is missing */
  const char *since; /* the oldest CANN that has it, or NULL */
  int need;          /* REQUIRED: the library is unusable without it */
} entry;

#define ENTRY_(ret, symbol, field, params, args, since, need) \
  {#symbol, offsetof(aipc_provider, field), (any_fn)stub_##field, since, need},
static const entry entries[] = {AIPC_CALLS(ENTRY_)};
#undef ENTRY_

#define N_ENTRIES (sizeof entries / sizeof entries[0])
_Static_assert(N_ENTRIES <= MAX_MISSING, "MAX_MISSING is too small for the call list");

static any_fn lookup(void *handle, const char *symbol) {
  any_fn fn;
  void *p = dlsym(handle, symbol);
  memcpy(&fn, &p, sizeof fn); /* POSIX: dlsym's result is the function's address */
  return fn;
}

static void set_entry(const entry *e, any_fn fn) { memcpy((char *)&table + e->offset, &fn, sizeof fn); }
static any_fn get_entry(const entry *e) {
  any_fn fn;
  memcpy(&fn, (char *)&table + e->offset, sizeof fn);
  return fn;
}

/* Fills the table from handle. 0, or -1 with the missing required symbols in why. */
static int fill_table(void *handle, char *why, size_t whylen) {
  cann_state *st = self();
  int ok = 1;
  for (size_t i = 0; i < N_ENTRIES; i++) {
    if (entries[i].need == REQUIRED && lookup(handle, entries[i].symbol) == NULL) {
      appendf(why, whylen, " %s", entries[i].symbol);
      ok = 0;
    }
  }
  if (!ok) return -1;

  st->n_missing = 0;
  for (size_t i = 0; i < N_ENTRIES; i++) {
    any_fn fn = lookup(handle, entries[i].symbol);
    if (fn == NULL) {
      fn = entries[i].stub;
      st->missing_names[st->n_missing] = entries[i].symbol;
      st->missing_since[st->n_missing] = entries[i].since != NULL ? entries[i].since : "a newer CANN";
      st->n_missing++;
    }
    set_entry(&entries[i], fn);
  }
  /* Two entries wrap the library's own function. */
  for (size_t i = 0; i < N_ENTRIES; i++) {
    any_fn fn = get_entry(&entries[i]);
    if (entries[i].offset == offsetof(aipc_provider, init)) memcpy(&st->real_init, &fn, sizeof fn);
    if (entries[i].offset == offsetof(aipc_provider, get_recent_err_msg)) {
      if (fn == entries[i].stub) fn = NULL; /* no messages of its own */
      memcpy(&st->real_recent_err_msg, &fn, sizeof fn);
    }
  }
  table.name = "cann";
  table.init = cann_init;
  table.get_recent_err_msg = cann_recent_err_msg;
  table.ipc_get_attr = NULL; /* CANN has no call to read an attribute back */
  table.ipc_expect_request = NULL; /* the driver serves imports itself */
  table.mem_physical_size = NULL; /* nor one for a physical allocation's size */
  table.report = cann_report;
  return 0;
}

/* ---- loading ------------------------------------------------------------- */

static int dlpack_mode_cpu(void) {
  const char *v = getenv(AIPC_CANN_DLPACK_ENV);
  return v != NULL && strcmp(v, "cpu") == 0;
}

int aipc__cann_check_env(char *err, size_t errlen) {
  const char *v = getenv(AIPC_CANN_DLPACK_ENV);
  if (v == NULL || v[0] == '\0' || strcmp(v, "ext") == 0 || strcmp(v, "cpu") == 0) return 0;
  snprintf(err, errlen,
           "%s must be 'ext' (NPU memory: DLPack device kDLExtDev, the default) or 'cpu' (the loaded "
           "library's device memory is host memory, e.g. libascendcl_emu.so), not '%s'",
           AIPC_CANN_DLPACK_ENV, v);
  return -1;
}

/* The file the library was loaded from, as an absolute path where possible. */
static void resolve_path(const char *requested) {
  Dl_info dli;
  const char *name = requested;
  void *sym;
  memcpy(&sym, &self()->real_init, sizeof sym);
  if (dladdr(sym, &dli) != 0 && dli.dli_fname != NULL && dli.dli_fname[0] != '\0') name = dli.dli_fname;
  char resolved[PATH_MAX];
  if (strchr(name, '/') != NULL && realpath(name, resolved) != NULL) name = resolved;
  snprintf(self()->lib_path, sizeof self()->lib_path, "%s", name);
}

static int add_candidate(const char **list, char (*storage)[PATH_MAX], size_t *n, const char *dir_env) {
  const char *dir = getenv(dir_env);
  if (dir == NULL || dir[0] == '\0') return 0;
  snprintf(storage[*n], PATH_MAX, "%s/lib64/%s", dir, LIB_NAME);
  list[*n] = storage[*n];
  (*n)++;
  return 1;
}

static void do_load(void) {
  const char *candidates[5];
  char storage[5][PATH_MAX];
  size_t n = 0;
  char tried[ERR_MAX] = {0};
  const char *explicit_lib = getenv("ASCEND_IPC_CANN_LIB");
  int is_explicit = explicit_lib != NULL && explicit_lib[0] != '\0';

  if (is_explicit) {
    candidates[n++] = explicit_lib;
  } else {
    add_candidate(candidates, storage, &n, "ASCEND_HOME_PATH");
    add_candidate(candidates, storage, &n, "ASCEND_TOOLKIT_HOME");
    candidates[n++] = DEFAULT_TOOLKIT "/lib64/" LIB_NAME;
    candidates[n++] = LIB_NAME;
  }

  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (size_t j = 0; j < i; j++) seen |= strcmp(candidates[i], candidates[j]) == 0;
    if (seen) continue;
    (void)dlerror();
    void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      const char *e = dlerror();
      if (e == NULL) e = "dlopen failed";
      size_t clen = strlen(candidates[i]);
      if (strncmp(e, candidates[i], clen) == 0 && strncmp(e + clen, ": ", 2) == 0) e += clen + 2; /* no echo */
      appendf(tried, sizeof tried, "\n  %s: %s", candidates[i], e);
      continue;
    }
    char why[512] = {0};
    if (fill_table(h, why, sizeof why) < 0) {
      appendf(tried, sizeof tried, "\n  %s: loaded, but it does not export%s (is it libascendcl?)", candidates[i],
              why);
      dlclose(h); /* not a runtime: none of its calls were made */
      continue;
    }
    cann_state *st = self();
    st->lib = h;
    resolve_path(candidates[i]);
    table.library_path = st->lib_path;
    table.host_visible = dlpack_mode_cpu();
    table.dlpack_device_type = table.host_visible ? AIPC_DLPACK_DEVICE_CPU : AIPC_DLPACK_DEVICE_EXT;
    st->report.n_missing = st->n_missing;
    st->report.missing = st->missing_names;
    st->report.missing_since = st->missing_since;
    loaded = &table;
    return;
  }

  if (is_explicit) {
    snprintf(load_error, sizeof load_error, "could not load the CANN runtime from ASCEND_IPC_CANN_LIB:%s", tried);
  } else {
    snprintf(load_error, sizeof load_error,
             "could not load the CANN runtime (%s); tried:%s\n"
             "Install the CANN toolkit and source its set_env.sh (it sets ASCEND_HOME_PATH and "
             "LD_LIBRARY_PATH), or set ASCEND_IPC_CANN_LIB to the library's path.",
             LIB_NAME, tried);
  }
}

const aipc_provider *aipc__cann_provider_load(char *err, size_t errlen) {
  pthread_once(&load_once, do_load);
  if (loaded == NULL && err != NULL && errlen > 0) snprintf(err, errlen, "%s", load_error);
  return loaded;
}

/* ---- version ------------------------------------------------------------- */

/* Copies the printable prefix of src (at most VERSION_MAX - 1 characters). */
static int take_version(char *version, const char *src) {
  size_t i = 0;
  while (i < VERSION_MAX - 1 && src[i] >= 0x20 && src[i] < 0x7f) {
    version[i] = src[i];
    i++;
  }
  version[i] = '\0';
  return i > 0;
}

static void do_version(void) {
  cann_state *st = self();
  char *version = st->version;
  size_t version_cap = sizeof st->version;
  /* Room to spare: the CANN structs are a few hundred bytes. */
  char buf[4096];
  snprintf(version, version_cap, "unknown");
  if (st->lib == NULL) return;

  any_fn fn = lookup(st->lib, "aclsysGetCANNVersion");
  if (fn != NULL) {
    aclError (*get)(int name, void *version_out);
    memcpy(&get, &fn, sizeof get);
    memset(buf, 0, sizeof buf);
    if (get(0 /* ACL_PKG_NAME_CANN */, buf) == ACL_SUCCESS && take_version(version, buf)) {
      st->version_source = "aclsysGetCANNVersion";
      return;
    }
    (void)take_library_message();
  }
  fn = lookup(st->lib, "aclsysGetVersionStr");
  if (fn != NULL) {
    aclError (*get)(char *pkg, char *version_out);
    memcpy(&get, &fn, sizeof get);
    char pkg[] = "runtime";
    memset(buf, 0, sizeof buf);
    if (get(pkg, buf) == ACL_SUCCESS && take_version(version, buf)) {
      st->version_source = "aclsysGetVersionStr(runtime)";
      return;
    }
    (void)take_library_message();
  }
  fn = lookup(st->lib, "aclrtGetVersion");
  if (fn != NULL) {
    aclError (*get)(int32_t *major, int32_t *minor, int32_t *patch);
    memcpy(&get, &fn, sizeof get);
    int32_t major = 0, minor = 0, patch = 0;
    if (get(&major, &minor, &patch) == ACL_SUCCESS) {
      snprintf(version, version_cap, "unknown (AscendCL API %d.%d.%d)", (int)major, (int)minor, (int)patch);
      st->version_source = "aclrtGetVersion";
      return;
    }
    (void)take_library_message();
  }
  snprintf(version, version_cap, "unknown");
}

static void do_version_once(void) {
  do_version();
  self()->report.version = self()->version;
  self()->report.version_source = self()->version_source;
}

static const char *cann_version(void) {
  pthread_once(&version_once, do_version_once);
  return self()->version;
}

static const aipc_provider_report *cann_report(void) {
  (void)cann_version(); /* fills report.version once */
  return &self()->report;
}
