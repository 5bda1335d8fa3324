/*
 * The cann provider: libascendcl.so loaded with dlopen, its entry points
 * placed in the provider table (see cann_provider.h for the search order).
 *
 * The table entries are the library's own functions wherever the signatures
 * allow, so a call costs one indirect jump. Three entries are wrappers:
 *   init               aclInit once per process; a repeated initialisation
 *                      (another component such as torch_npu came first)
 *                      counts as success;
 *   get_recent_err_msg the message of a failure made here (a missing
 *                      symbol, a failed aclInit), else the library's own;
 *   a missing call     fails with ACL_ERROR_FEATURE_UNSUPPORTED and says
 *                      which symbol is missing and which CANN has it.
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

/* ---- state (written once, under load_once) ------------------------------- */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static aipc_provider table;
static const aipc_provider *loaded; /* &table after a successful load */
static char load_error[ERR_MAX + 512]; /* the paths tried, and advice */
static void *lib;
static char lib_path[PATH_MAX];

static aclError (*real_init)(const char *configPath);
static const char *(*real_recent_err_msg)(void);

#define MAX_MISSING 32
static const char *missing_names[MAX_MISSING];
static const char *missing_since[MAX_MISSING];
static size_t n_missing;

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static char version[VERSION_MAX];
static const char *version_source;

static aipc_cann_info info;

/* aclInit: once per process. */
static pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
static int init_done;
static aclError init_rc;
static char init_message[1024];

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
  if (real_recent_err_msg == NULL) return NULL;
  const char *m = real_recent_err_msg();
  return (m != NULL && m[0] != '\0') ? m : NULL;
}

static const char *cann_recent_err_msg(void) {
  /* Consume both, so neither shows up stale with a later failure. */
  const char *ours = aipc__recent_err_msg();
  const char *theirs = take_library_message();
  return ours != NULL ? ours : theirs;
}

/* ---- missing calls ------------------------------------------------------- */

/* The oldest CANN whose documentation lists the call (see docs/hardware.md). */
static const char *since_of(const char *symbol) {
  static const struct {
    const char *symbol;
    const char *since;
  } known[] = {
      {"aclrtIpcMemGetExportKey", "CANN 8.2.RC1"},
      {"aclrtIpcMemSetImportPid", "CANN 8.2.RC1"},
      {"aclrtIpcMemImportByKey", "CANN 8.2.RC1"},
      {"aclrtIpcMemClose", "CANN 8.2.RC1"},
      {"aclrtIpcMemSetAttr", "CANN 8.5.0"},
      {"aclrtIpcMemImportPidInterServer", "CANN 8.5.0"},
      {"aclrtDeviceGetBareTgid", "CANN 8.0.0"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    if (strcmp(known[i].symbol, symbol) == 0) return known[i].since;
  }
  return NULL;
}

static const char *cann_version(void);

static aclError missing_call(const char *symbol) {
  const char *since = since_of(symbol);
  return aipc__fail(ACL_ERROR_FEATURE_UNSUPPORTED,
                    "%s is not available: %.300s (CANN %s) does not export it; %s%s%s", symbol, lib_path,
                    cann_version(), since != NULL ? "it is in " : "it needs a newer CANN",
                    since != NULL ? since : "", since != NULL ? " and newer" : "");
}

static aclError stub_finalize(void) { return missing_call("aclFinalize"); }
static aclError stub_reset_device(int32_t deviceId) {
  (void)deviceId;
  return missing_call("aclrtResetDevice");
}
static aclError stub_can_access_peer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
  (void)canAccessPeer, (void)deviceId, (void)peerDeviceId;
  return missing_call("aclrtDeviceCanAccessPeer");
}
static aclError stub_enable_peer_access(int32_t peerDeviceId, uint32_t flags) {
  (void)peerDeviceId, (void)flags;
  return missing_call("aclrtDeviceEnablePeerAccess");
}
static aclError stub_bare_tgid(int32_t *pid) {
  (void)pid;
  return missing_call("aclrtDeviceGetBareTgid");
}
static aclError stub_mem_info(aclrtMemAttr attr, size_t *free_bytes, size_t *total) {
  (void)attr, (void)free_bytes, (void)total;
  return missing_call("aclrtGetMemInfo");
}
static aclError stub_malloc_host(void **hostPtr, size_t size) {
  (void)hostPtr, (void)size;
  return missing_call("aclrtMallocHost");
}
static aclError stub_free_host(void *hostPtr) {
  (void)hostPtr;
  return missing_call("aclrtFreeHost");
}
static aclError stub_memcpy_async(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                  aclrtStream stream) {
  (void)dst, (void)destMax, (void)src, (void)count, (void)kind, (void)stream;
  return missing_call("aclrtMemcpyAsync");
}
static aclError stub_memset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  (void)devPtr, (void)maxCount, (void)value, (void)count;
  return missing_call("aclrtMemset");
}
static aclError stub_create_stream(aclrtStream *stream) {
  (void)stream;
  return missing_call("aclrtCreateStream");
}
static aclError stub_destroy_stream(aclrtStream stream) {
  (void)stream;
  return missing_call("aclrtDestroyStream");
}
static aclError stub_synchronize_stream(aclrtStream stream) {
  (void)stream;
  return missing_call("aclrtSynchronizeStream");
}
static aclError stub_ipc_get_export_key(void *devPtr, size_t size, char *key, size_t len, uint64_t flags) {
  (void)devPtr, (void)size, (void)key, (void)len, (void)flags;
  return missing_call("aclrtIpcMemGetExportKey");
}
static aclError stub_ipc_set_import_pid(const char *key, int32_t *pid, size_t num) {
  (void)key, (void)pid, (void)num;
  return missing_call("aclrtIpcMemSetImportPid");
}
static aclError stub_ipc_import_pid_inter_server(const char *key, aclrtServerPid *serverPids, size_t num) {
  (void)key, (void)serverPids, (void)num;
  return missing_call("aclrtIpcMemImportPidInterServer");
}
static aclError stub_ipc_import_by_key(void **devPtr, const char *key, uint64_t flags) {
  (void)devPtr, (void)key, (void)flags;
  return missing_call("aclrtIpcMemImportByKey");
}
static aclError stub_ipc_set_attr(const char *key, aclrtIpcMemAttrType type, uint64_t attr) {
  (void)key, (void)type, (void)attr;
  return missing_call("aclrtIpcMemSetAttr");
}
static aclError stub_ipc_close(const char *key) {
  (void)key;
  return missing_call("aclrtIpcMemClose");
}

/* ---- aclInit, once ------------------------------------------------------- */

static aclError cann_init(const char *configPath) {
  pthread_mutex_lock(&init_mutex);
  if (!init_done) {
    aclError rc = real_init(configPath);
    const char *m = take_library_message();
    if (rc == AIPC_CANN_ERROR_REPEAT_INITIALIZE) rc = ACL_SUCCESS; /* someone else initialised it */
    if (rc != ACL_SUCCESS) {
      snprintf(init_message, sizeof init_message, "aclInit of %.300s failed with %d: %.600s", lib_path, (int)rc,
               m != NULL ? m : "(the library gave no message)");
    }
    init_rc = rc;
    init_done = 1;
  }
  aclError rc = init_rc;
  pthread_mutex_unlock(&init_mutex);
  if (rc != ACL_SUCCESS) return aipc__fail(rc, "%s", init_message);
  return ACL_SUCCESS;
}

/* ---- the symbol table ------------------------------------------------------ */

typedef struct entry {
  const char *symbol;
  size_t offset; /* of the field in aipc_provider */
  any_fn stub;   /* used when the symbol is missing; NULL: the library is unusable without it */
} entry;

#define ENTRY(field, symbol, stub) {symbol, offsetof(aipc_provider, field), (any_fn)(stub)}

static const entry entries[] = {
    ENTRY(set_device, "aclrtSetDevice", NULL),
    ENTRY(get_device, "aclrtGetDevice", NULL),
    ENTRY(get_device_count, "aclrtGetDeviceCount", NULL),
    ENTRY(malloc, "aclrtMalloc", NULL),
    ENTRY(free, "aclrtFree", NULL),
    ENTRY(memcpy, "aclrtMemcpy", NULL),
    ENTRY(finalize, "aclFinalize", stub_finalize),
    ENTRY(reset_device, "aclrtResetDevice", stub_reset_device),
    ENTRY(device_can_access_peer, "aclrtDeviceCanAccessPeer", stub_can_access_peer),
    ENTRY(device_enable_peer_access, "aclrtDeviceEnablePeerAccess", stub_enable_peer_access),
    ENTRY(device_get_bare_tgid, "aclrtDeviceGetBareTgid", stub_bare_tgid),
    ENTRY(get_mem_info, "aclrtGetMemInfo", stub_mem_info),
    ENTRY(malloc_host, "aclrtMallocHost", stub_malloc_host),
    ENTRY(free_host, "aclrtFreeHost", stub_free_host),
    ENTRY(memcpy_async, "aclrtMemcpyAsync", stub_memcpy_async),
    ENTRY(memset, "aclrtMemset", stub_memset),
    ENTRY(create_stream, "aclrtCreateStream", stub_create_stream),
    ENTRY(destroy_stream, "aclrtDestroyStream", stub_destroy_stream),
    ENTRY(synchronize_stream, "aclrtSynchronizeStream", stub_synchronize_stream),
    ENTRY(ipc_get_export_key, "aclrtIpcMemGetExportKey", stub_ipc_get_export_key),
    ENTRY(ipc_set_import_pid, "aclrtIpcMemSetImportPid", stub_ipc_set_import_pid),
    ENTRY(ipc_import_pid_inter_server, "aclrtIpcMemImportPidInterServer", stub_ipc_import_pid_inter_server),
    ENTRY(ipc_import_by_key, "aclrtIpcMemImportByKey", stub_ipc_import_by_key),
    ENTRY(ipc_set_attr, "aclrtIpcMemSetAttr", stub_ipc_set_attr),
    ENTRY(ipc_close, "aclrtIpcMemClose", stub_ipc_close),
};

static any_fn lookup(void *handle, const char *symbol) {
  any_fn fn;
  void *p = dlsym(handle, symbol);
  memcpy(&fn, &p, sizeof fn); /* POSIX: dlsym's result is the function's address */
  return fn;
}

static void set_entry(const entry *e, any_fn fn) { memcpy((char *)&table + e->offset, &fn, sizeof fn); }

/* Fills the table from handle. 0, or -1 with the missing required symbols in why. */
static int fill_table(void *handle, char *why, size_t whylen) {
  int ok = 1;
  any_fn init = lookup(handle, "aclInit");
  if (init == NULL) {
    appendf(why, whylen, " aclInit");
    ok = 0;
  }
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    if (entries[i].stub == NULL && lookup(handle, entries[i].symbol) == NULL) {
      appendf(why, whylen, " %s", entries[i].symbol);
      ok = 0;
    }
  }
  if (!ok) return -1;

  memset(&table, 0, sizeof table);
  n_missing = 0;
  memcpy(&real_init, &init, sizeof init);
  any_fn recent = lookup(handle, "aclGetRecentErrMsg");
  memcpy(&real_recent_err_msg, &recent, sizeof recent);
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    any_fn fn = lookup(handle, entries[i].symbol);
    if (fn == NULL) {
      fn = entries[i].stub;
      if (n_missing < MAX_MISSING) {
        missing_names[n_missing] = entries[i].symbol;
        const char *since = since_of(entries[i].symbol);
        missing_since[n_missing] = since != NULL ? since : "a newer CANN";
        n_missing++;
      }
    }
    set_entry(&entries[i], fn);
  }
  table.name = "cann";
  table.init = cann_init;
  table.get_recent_err_msg = cann_recent_err_msg;
  table.ipc_get_attr = NULL; /* CANN has no call to read an attribute back */
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
  memcpy(&sym, &real_init, sizeof sym);
  if (dladdr(sym, &dli) != 0 && dli.dli_fname != NULL && dli.dli_fname[0] != '\0') name = dli.dli_fname;
  char resolved[PATH_MAX];
  if (strchr(name, '/') != NULL && realpath(name, resolved) != NULL) name = resolved;
  snprintf(lib_path, sizeof lib_path, "%s", name);
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
    lib = h;
    resolve_path(candidates[i]);
    table.library_path = lib_path;
    table.host_visible = dlpack_mode_cpu();
    table.dlpack_device_type = table.host_visible ? AIPC_DLPACK_DEVICE_CPU : AIPC_DLPACK_DEVICE_EXT;
    table.private_data = lib;
    info.library_path = lib_path;
    info.n_missing = n_missing;
    info.missing = missing_names;
    info.missing_since = missing_since;
    info.dlpack_device_type = table.dlpack_device_type;
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
static int take_version(const char *src) {
  size_t i = 0;
  while (i < VERSION_MAX - 1 && src[i] >= 0x20 && src[i] < 0x7f) {
    version[i] = src[i];
    i++;
  }
  version[i] = '\0';
  return i > 0;
}

static void do_version(void) {
  /* Room to spare: the CANN structs are a few hundred bytes. */
  char buf[4096];
  snprintf(version, sizeof version, "unknown");
  if (lib == NULL) return;

  any_fn fn = lookup(lib, "aclsysGetCANNVersion");
  if (fn != NULL) {
    aclError (*get)(int name, void *version_out);
    memcpy(&get, &fn, sizeof get);
    memset(buf, 0, sizeof buf);
    if (get(0 /* ACL_PKG_NAME_CANN */, buf) == ACL_SUCCESS && take_version(buf)) {
      version_source = "aclsysGetCANNVersion";
      return;
    }
    (void)take_library_message();
  }
  fn = lookup(lib, "aclsysGetVersionStr");
  if (fn != NULL) {
    aclError (*get)(char *pkg, char *version_out);
    memcpy(&get, &fn, sizeof get);
    char pkg[] = "runtime";
    memset(buf, 0, sizeof buf);
    if (get(pkg, buf) == ACL_SUCCESS && take_version(buf)) {
      version_source = "aclsysGetVersionStr(runtime)";
      return;
    }
    (void)take_library_message();
  }
  fn = lookup(lib, "aclrtGetVersion");
  if (fn != NULL) {
    aclError (*get)(int32_t *major, int32_t *minor, int32_t *patch);
    memcpy(&get, &fn, sizeof get);
    int32_t major = 0, minor = 0, patch = 0;
    if (get(&major, &minor, &patch) == ACL_SUCCESS) {
      snprintf(version, sizeof version, "unknown (AscendCL API %d.%d.%d)", (int)major, (int)minor, (int)patch);
      version_source = "aclrtGetVersion";
      return;
    }
    (void)take_library_message();
  }
  snprintf(version, sizeof version, "unknown");
}

static void do_version_once(void) {
  do_version();
  info.version = version;
  info.version_source = version_source;
}

static const char *cann_version(void) {
  pthread_once(&version_once, do_version_once);
  return version;
}

const aipc_cann_info *aipc__cann_info(void) {
  if (loaded == NULL) return NULL;
  (void)cann_version(); /* fills info.version once */
  return &info;
}
