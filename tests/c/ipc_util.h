/* Helpers shared by the IPC tests (tests/c/test_ipc_*.c). Header-only: each
 * test program is built from one .c file and harness.c. */
#ifndef ASCEND_IPC_TEST_IPC_UTIL_H_
#define ASCEND_IPC_TEST_IPC_UTIL_H_

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define KEYLEN ACL_IPC_MEM_KEY_LEN
#define PAGE ((size_t)4096)
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define EXPORT_DEFAULT ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT
#define EXPORT_ANY ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION

static inline int under_valgrind(void) { return getenv("ASCEND_IPC_VALGRIND") != NULL; }

/* Under valgrind, a process's leak scan at exit reads every readable
 * mapping, the sparse device arenas (2x capacity, inherited by forked
 * children too) included, and so fills them with pages. Small capacities
 * keep that cheap; no IPC test needs more than a few tens of MiB. */
__attribute__((constructor)) static void ipc_test_valgrind_env_(void) {
  if (under_valgrind()) setenv("ASCEND_IPC_EMU_MEMORY", "128M", 0);
}

/* For a test that a call ends for its reason (refused, gone, an error
 * reply, a wake-up) and not by a timeout: sets ASCEND_IPC_TIMEOUT_MS, read
 * once per process, to its largest value (a day) for the runtime started
 * next and every process forked after that. Call it before the test's first
 * runtime call. A call that waited for the timeout then hangs past the
 * harness's time limit and fails the test there, however slow or loaded the
 * machine: no wall-clock bound is needed to tell "promptly" from "after the
 * timeout". */
static inline void timeout_never(void) { setenv("ASCEND_IPC_TIMEOUT_MS", "86400000", 1); }

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void *dmalloc(size_t n) {
  void *p = NULL;
  CHECK_OK(aclrtMalloc(&p, n, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK(p != NULL);
  return p;
}

/* Allocates size bytes on the current device and exports them. */
static inline aclrtStream stream_new(void) {
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  return s;
}

/* A notify that s waits on: work queued on s after this call runs only once
 * the test records it (aclrtRecordNotify), so "still queued" needs no clock. */
static inline aclrtNotify gate_new(aclrtStream s) {
  aclrtNotify g;
  CHECK_OK(aclrtCreateNotify(&g, 0));
  CHECK_OK(aclrtWaitAndResetNotify(g, s, 0));
  return g;
}

static inline void *export_new(size_t size, uint64_t flags, char key[KEYLEN]) {
  void *p = dmalloc(size);
  memset(key, 0, KEYLEN); /* the key is shorter than its buffer: all of it gets sent around */
  CHECK_OK(aclrtIpcMemGetExportKey(p, size, key, KEYLEN, flags));
  CHECK(strlen(key) > 0 && strlen(key) < KEYLEN);
  return p;
}

/* A two-way pipe between a parent and one child. */
typedef struct chan {
  int up[2];   /* child -> parent */
  int down[2]; /* parent -> child */
} chan;

static inline void chan_open(chan *c) {
  CHECK(pipe(c->up) == 0);
  CHECK(pipe(c->down) == 0);
}
/* In the child, after fork. */
static inline void chan_child(chan *c) {
  close(c->up[0]);
  close(c->down[1]);
  c->up[0] = c->down[1] = -1;
}
/* In the parent, after fork. */
static inline void chan_parent(chan *c) {
  close(c->up[1]);
  close(c->down[0]);
  c->up[1] = c->down[0] = -1;
}
/* Closes what is still open of c (never a descriptor twice). */
static inline void chan_close(chan *c) {
  for (int i = 0; i < 2; i++) {
    if (c->up[i] >= 0) close(c->up[i]);
    if (c->down[i] >= 0) close(c->down[i]);
    c->up[i] = c->down[i] = -1;
  }
}
static inline void to_child(chan *c, const void *b, size_t n) { th_write(c->down[1], b, n); }
static inline void from_parent(chan *c, void *b, size_t n) { th_read(c->down[0], b, n); }
static inline void to_parent(chan *c, const void *b, size_t n) { th_write(c->up[1], b, n); }
static inline void from_child(chan *c, void *b, size_t n) { th_read(c->up[0], b, n); }
static inline void send_int(int fd, int v) { th_write(fd, &v, sizeof v); }
static inline int recv_int(int fd) {
  int v;
  th_read(fd, &v, sizeof v);
  return v;
}

/* Forks a child that runs fn(c, arg) with its end of the channel. */
typedef int (*chan_fn)(chan *c, void *arg);
typedef struct chan_start {
  chan *c;
  chan_fn fn;
  void *arg;
} chan_start;
static inline int chan_trampoline_(void *p) {
  chan_start *s = p;
  chan_child(s->c);
  return s->fn(s->c, s->arg);
}
static inline int chan_spawn(chan *c, chan_fn fn, void *arg) {
  chan_start s = {c, fn, arg};
  int pid = th_spawn(chan_trampoline_, &s);
  chan_parent(c);
  return pid;
}

/* Runs fn(arg) in a child, sends it key, and reads back what it reports: a
 * code (returned) and cap bytes of message; waits for the child (it must
 * exit 0). */
static inline int ask_child(chan_fn fn, void *arg, const char *key, char *msg, size_t cap) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, fn, arg);
  to_child(&c, key, KEYLEN);
  int rc = recv_int(c.up[0]);
  from_child(&c, msg, cap);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  return rc;
}

/* Open descriptors of this process. */
static inline int fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  CHECK(d != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own */
}

/* Fills [p, p+n) with a pattern derived from seed; checks it. */
static inline void fill_pattern(void *p, size_t n, uint32_t seed) {
  uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++) w[i] = seed * 2654435761u + (uint32_t)i;
}
static inline int check_pattern(const void *p, size_t n, uint32_t seed) {
  const uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++)
    if (w[i] != seed * 2654435761u + (uint32_t)i) return 0;
  return 1;
}

/* A xorshift64 step: reproducible pseudo-random numbers from a seed (never 0). */
static inline uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x ? x : 0x9E3779B97F4A7C15ull;
}

/* ---- physical memory (the VMM calls) ---- */

/* Properties of plain physical memory on device. */
static inline aclrtPhysicalMemProp phys_prop_on(uint32_t device) {
  aclrtPhysicalMemProp p;
  memset(&p, 0, sizeof p);
  p.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  p.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  p.memAttr = ACL_HBM_MEM_NORMAL;
  p.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

/* size bytes of physical memory on device 0. */
static inline aclrtDrvMemHandle phys_new(size_t size) {
  aclrtPhysicalMemProp p = phys_prop_on(0);
  aclrtDrvMemHandle h = NULL;
  CHECK_OK(aclrtMallocPhysical(&h, size, &p, 0));
  CHECK(h != NULL);
  return h;
}

/* ---- the key format, for crafting forged keys (see docs/design-ipc.md) ---- */

#define KEY_PREFIX "aipc2."
#define KEY_REC 42
#define KEY_CHARS 62

typedef struct key_rec {
  uint32_t pid, sdid;
  uint64_t nonce, id; /* the nonce has 48 bits */
  uint8_t secret[16];
  uint32_t place; /* last, so that {pid, sdid, nonce, id, secret} initialisers leave it 0: unknown */
} key_rec;

static inline int b64v_(char c) {
  const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char *p = c ? strchr(a, c) : NULL;
  return p ? (int)(p - a) : -1;
}

/* The record's layout, little-endian: pid 4, sdid 4, nonce 6, place 4, id 8, secret 16. */
static inline key_rec key_decode(const char *key) {
  CHECK(strlen(key) == KEY_CHARS && strncmp(key, KEY_PREFIX, 6) == 0);
  uint8_t r[KEY_REC + 2] = {0};
  uint32_t acc = 0;
  int bits = 0, n = 0;
  for (const char *s = key + 6; *s; s++) {
    acc = acc << 6 | (uint32_t)b64v_(*s);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      r[n++] = (uint8_t)(acc >> bits);
    }
  }
  CHECK_EQ(n, KEY_REC);
  key_rec k = {0};
  memcpy(&k.pid, r, 4);
  memcpy(&k.sdid, r + 4, 4);
  memcpy(&k.nonce, r + 8, 6);
  memcpy(&k.place, r + 14, 4);
  memcpy(&k.id, r + 18, 8);
  memcpy(k.secret, r + 26, 16);
  return k;
}

/* This process's place, as its keys carry it: a key made up here must have
 * it, or the runtime refuses it before any connection. */
static inline uint32_t own_place(void) {
  static uint32_t place;
  if (place) return place;
  void *p = NULL;
  char key[KEYLEN] = {0};
  CHECK(aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
  CHECK(aclrtIpcMemGetExportKey(p, 4096, key, KEYLEN, ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION) ==
        ACL_SUCCESS);
  place = key_decode(key).place;
  CHECK(aclrtIpcMemClose(key) == ACL_SUCCESS);
  CHECK(aclrtFree(p) == ACL_SUCCESS);
  return place;
}

static inline void key_encode(const key_rec *k, char out[KEYLEN]) {
  const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  uint8_t r[KEY_REC];
  memcpy(r, &k->pid, 4);
  memcpy(r + 4, &k->sdid, 4);
  memcpy(r + 8, &k->nonce, 6);
  memcpy(r + 14, &k->place, 4);
  memcpy(r + 18, &k->id, 8);
  memcpy(r + 26, k->secret, 16);
  strcpy(out, KEY_PREFIX);
  char *o = out + 6;
  uint32_t acc = 0;
  int bits = 0;
  for (int i = 0; i < KEY_REC; i++) {
    acc = acc << 8 | r[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      *o++ = a[(acc >> bits) & 63];
    }
  }
  if (bits) *o++ = a[(acc << (6 - bits)) & 63];
  *o = '\0';
}

#endif
