/* IPC keys: formatting, strict parsing, secrets. See key.h. */
#include "emu/ipc/key.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "core/calls.h"
#include "core/error.h"
#include "core/le.h"
#include "os/os.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Value of each byte as a base64url character, or -1 (a table: parsing is
 * on every import and close). */
static const int8_t b64_table[256] = {
#define X16 -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1
    X16, X16,
    /* 0x20 */ -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1,
    /* 0x30 */ 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
    /* 0x40 */ -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    /* 0x50 */ 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, 63,
    /* 0x60 */ -1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    /* 0x70 */ 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
    X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
};

static int b64_value(unsigned char c) { return b64_table[c]; }

static const struct {
  const char *prefix, *what;
  enum aipc_call issuer;
  const char *allow;
} kinds[AIPC_OBJECT_KIND_COUNT] = {
#define AIPC_OBJECT_KIND_ROW_(name, prefix, what, issuer, allow) {prefix, what, AIPC_CALL_##issuer, allow},
    AIPC_OBJECT_KINDS(AIPC_OBJECT_KIND_ROW_)
#undef AIPC_OBJECT_KIND_ROW_
};

const char *aipc__object_what(aipc__object_kind kind) {
  return (unsigned)kind < AIPC_OBJECT_KIND_COUNT ? kinds[kind].what : "an unknown kind of key";
}

const char *aipc__object_issuer(aipc__object_kind kind) {
  return (unsigned)kind < AIPC_OBJECT_KIND_COUNT ? aipc__call_names[kinds[kind].issuer] : "?";
}

const char *aipc__object_allow(aipc__object_kind kind) {
  return (unsigned)kind < AIPC_OBJECT_KIND_COUNT ? kinds[kind].allow : "?";
}

aclError aipc__shareable_parse(const char *call, uint64_t handle, aipc__key *out) {
  uint64_t door = handle >> AIPC_SHAREABLE_DOOR_SHIFT;
  uint64_t random = handle & AIPC_SHAREABLE_RANDOM_MASK;
  if (door == 0 || random == 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: 0x%016llx is not a shareable handle (aclrtMemExportToShareableHandle writes one)", call,
                      (unsigned long long)handle);
  memset(out, 0, sizeof *out);
  out->kind = AIPC_OBJECT_PHYSICAL;
  out->pid = (uint32_t)door;
  out->nonce = 0;
  out->export_id = handle;
  return ACL_SUCCESS;
}

void aipc__key_format(const aipc__key *k, char out[AIPC_KEY_CHARS + 1]) {
  _Static_assert(AIPC_KEY_RECORD_LEN % 3 == 0, "a record is whole base64 groups: no padding, no partial character");
  uint8_t r[AIPC_KEY_RECORD_LEN];
  aipc__put32(r, k->pid);
  aipc__put32(r + 4, k->sdid);
  aipc__put32(r + 8, (uint32_t)k->nonce);
  r[12] = (uint8_t)(k->nonce >> 32);
  r[13] = (uint8_t)(k->nonce >> 40);
  aipc__put32(r + 14, k->place);
  aipc__put64(r + 18, k->export_id);
  memcpy(r + 26, k->secret, AIPC_SECRET_LEN);
  memcpy(out, kinds[(unsigned)k->kind < AIPC_OBJECT_KIND_COUNT ? k->kind : 0].prefix, AIPC_KEY_PREFIX_LEN);
  char *o = out + AIPC_KEY_PREFIX_LEN;
  for (size_t i = 0; i < AIPC_KEY_RECORD_LEN; i += 3) {
    uint32_t v = (uint32_t)r[i] << 16 | (uint32_t)r[i + 1] << 8 | r[i + 2];
    *o++ = b64[(v >> 18) & 63];
    *o++ = b64[(v >> 12) & 63];
    *o++ = b64[(v >> 6) & 63];
    *o++ = b64[v & 63];
  }
  *o = '\0';
  memset(r, 0, sizeof r);
}

void aipc__key_write(aipc__object_kind kind, uint32_t pid, uint32_t sdid, uint64_t nonce, uint32_t place,
                     uint64_t export_id, const uint8_t secret[AIPC_SECRET_LEN], char out[AIPC_KEY_CHARS + 1]) {
  aipc__key k = {.kind = kind, .pid = pid, .sdid = sdid, .nonce = nonce, .place = place, .export_id = export_id};
  memcpy(k.secret, secret, AIPC_SECRET_LEN);
  aipc__key_format(&k, out);
  memset(k.secret, 0, sizeof k.secret);
}
aclError aipc__key_parse(const char *call, const char *key, aipc__key *out) {
  if (!key) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is NULL", call);
  size_t n = strnlen(key, ACL_IPC_MEM_KEY_LEN);
  if (n == ACL_IPC_MEM_KEY_LEN)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: key is not a NUL-terminated string of at most %d characters", call,
                      ACL_IPC_MEM_KEY_LEN - 1);
  if (n == 0) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key is an empty string", call);
  int kind = -1;
  _Static_assert(AIPC_OBJECT_KIND_COUNT == 4, "the message below names every prefix");
  for (int i = 0; i < AIPC_OBJECT_KIND_COUNT && kind < 0; i++)
    if (n >= AIPC_KEY_PREFIX_LEN && memcmp(key, kinds[i].prefix, AIPC_KEY_PREFIX_LEN) == 0) kind = i;
  if (kind < 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: key does not start with \"%s\", \"%s\", \"%s\" or \"%s\": not a key of this runtime "
                      "(or of an incompatible version)",
                      call, kinds[0].prefix, kinds[1].prefix, kinds[2].prefix, kinds[3].prefix);
  if (n != AIPC_KEY_CHARS)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: key has %zu characters, a key has exactly %d (truncated or damaged?)", call, n,
                      AIPC_KEY_CHARS);
  const unsigned char *s = (const unsigned char *)key + AIPC_KEY_PREFIX_LEN;
  uint8_t r[AIPC_KEY_RECORD_LEN];
  size_t j = 0;
  for (size_t i = 0; i < AIPC_KEY_CHARS - AIPC_KEY_PREFIX_LEN; i += 4) {
    int v[4];
    for (int q = 0; q < 4; q++) {
      v[q] = b64_value(s[i + q]);
      if (v[q] < 0)
        return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key has an invalid character at position %zu", call,
                          i + (size_t)q + AIPC_KEY_PREFIX_LEN);
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    r[j++] = (uint8_t)(w >> 16);
    r[j++] = (uint8_t)(w >> 8);
    r[j++] = (uint8_t)w;
  }

  aipc__key k;
  k.kind = (aipc__object_kind)kind;
  k.pid = aipc__get32(r);
  k.sdid = aipc__get32(r + 4);
  k.nonce = (uint64_t)aipc__get32(r + 8) | (uint64_t)r[12] << 32 | (uint64_t)r[13] << 40;
  k.place = aipc__get32(r + 14);
  k.export_id = aipc__get64(r + 18);
  memcpy(k.secret, r + 26, AIPC_SECRET_LEN);
  memset(r, 0, sizeof r);
  if (k.pid == 0 || k.pid > INT32_MAX)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key names process %u, which cannot exist (forged or damaged key)",
                      call, k.pid);
  if (k.nonce == 0 || k.export_id == 0)
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: key has a zero nonce or export id (forged or damaged key)", call);
  *out = k;
  return ACL_SUCCESS;
}

aclError aipc__key_parse_kind(const char *call, const char *key, aipc__object_kind want, aipc__key *out) {
  aipc__key k;
  aclError rc = aipc__key_parse(call, key, &k);
  if (rc) return rc;
  if (k.kind != want) {
    memset(k.secret, 0, sizeof k.secret);
    return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: the key is %s (from %s), not %s", call, aipc__object_what(k.kind),
                      aipc__object_issuer(k.kind), aipc__object_what(want));
  }
  *out = k;
  return ACL_SUCCESS;
}

void aipc__event_handle_write(const char key[AIPC_KEY_CHARS + 1], aclrtIpcEventHandle *handle) {
  memset(handle, 0, sizeof *handle);
  memcpy(handle->reserved, key, AIPC_KEY_CHARS);
}

aclError aipc__event_handle_parse(const char *call, const aclrtIpcEventHandle *handle, aipc__key *out,
                                  char key[AIPC_KEY_CHARS + 1]) {
  _Static_assert(sizeof handle->reserved > AIPC_KEY_CHARS, "a key and its NUL fit in a handle");
  for (size_t i = AIPC_KEY_CHARS; i < sizeof handle->reserved; i++)
    if (handle->reserved[i] != 0)
      return aipc__fail(ACL_ERROR_INVALID_PARAM,
                        "%s: handle is not one aclrtIpcGetEventHandle wrote (byte %zu is not zero): damaged or forged",
                        call, i);
  aclError rc = aipc__key_parse_kind(call, handle->reserved, AIPC_OBJECT_EVENT, out);
  if (rc == ACL_SUCCESS) memcpy(key, handle->reserved, AIPC_KEY_CHARS + 1);
  return rc;
}

int aipc__secret_equal(const uint8_t *a, const uint8_t *b) {
  volatile uint8_t d = 0;
  for (size_t i = 0; i < AIPC_SECRET_LEN; i++) d |= (uint8_t)(a[i] ^ b[i]);
  return d == 0;
}

/* 16 secrets' worth: one getrandom call serves 16 exports. Guarded by
 * pool_lock, which nothing else is taken under. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t pool[256];
static size_t pool_left;

static int fill(uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = aipc__os_getrandom(p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int aipc__random(void *buf, size_t n) {
  if (n > sizeof pool) return fill(buf, n);
  int rc = 0;
  pthread_mutex_lock(&pool_lock);
  if (pool_left < n) {
    rc = fill(pool, sizeof pool);
    pool_left = rc == 0 ? sizeof pool : 0;
  }
  if (rc == 0) {
    uint8_t *src = pool + sizeof pool - pool_left;
    memcpy(buf, src, n);
    memset(src, 0, n); /* a handed-out byte never stays behind */
    pool_left -= n;
  }
  pthread_mutex_unlock(&pool_lock);
  return rc;
}

void aipc__random_atfork_prepare(void) { pthread_mutex_lock(&pool_lock); }
void aipc__random_atfork_parent(void) { pthread_mutex_unlock(&pool_lock); }

void aipc__random_atfork_child(void) {
  pool_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  memset(pool, 0, sizeof pool); /* never hand out the parent's random bytes */
  pool_left = 0;
}

/* ---- fabric handles (key.h) --------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

void aipc__fabric_write(const aipc__key *k, uint64_t supernode, uint8_t out[AIPC_FABRIC_LEN]) {
  memset(out, 0, AIPC_FABRIC_LEN);
  put_le(out + 0, AIPC_FABRIC_MAGIC, 4);
  put_le(out + 4, AIPC_FABRIC_VERSION, 2);
  put_le(out + 8, supernode, 8);
  put_le(out + 16, k->sdid, 4);
  put_le(out + 20, k->pid, 4);
  put_le(out + 24, k->nonce, 8);
  put_le(out + 32, k->place, 4);
  put_le(out + 40, k->export_id, 8);
  memcpy(out + 48, k->secret, AIPC_SECRET_LEN);
}

aclError aipc__fabric_parse(const char *call, const uint8_t in[AIPC_FABRIC_LEN], aipc__key *out,
                            uint64_t *supernode) {
  static const uint8_t zero[AIPC_FABRIC_LEN];
  const char *bad = NULL;
  uint64_t version = get_le(in + 4, 2), pid = get_le(in + 20, 4), nonce = get_le(in + 24, 8);
  if (get_le(in, 4) != AIPC_FABRIC_MAGIC)
    bad = "it does not start with this library's mark (bytes 0-3)";
  else if (version != AIPC_FABRIC_VERSION)
    bad = "its version (bytes 4-5) is not 1";
  else if (get_le(in + 6, 2) != 0 || get_le(in + 36, 4) != 0 || memcmp(in + 64, zero, AIPC_FABRIC_LEN - 64) != 0)
    bad = "its reserved bytes (6-7, 36-39, 64-127) are not zero";
  else if (get_le(in + 8, 8) == 0)
    bad = "its super-node id (bytes 8-15) is 0";
  else if (pid == 0 || pid > INT32_MAX)
    bad = "its exporter pid (bytes 20-23) is not a process id";
  else if (nonce == 0 || nonce > AIPC_NONCE_MASK)
    bad = "its exporter nonce (bytes 24-31) is out of range";
  else if (get_le(in + 40, 8) == 0)
    bad = "its export id (bytes 40-47) is 0";
  else if (memcmp(in + 48, zero, AIPC_SECRET_LEN) == 0)
    bad = "its secret (bytes 48-63) is all zeros";
  if (bad)
    return aipc__fail(ACL_ERROR_INVALID_PARAM,
                      "%s: shareableHandle is not an aclrtMemFabricHandle exported by this library: %s (damaged or "
                      "forged)",
                      call, bad);
  *out = (aipc__key){.kind = AIPC_OBJECT_PHYSICAL,
                     .pid = (uint32_t)pid,
                     .sdid = (uint32_t)get_le(in + 16, 4),
                     .nonce = nonce,
                     .place = (uint32_t)get_le(in + 32, 4),
                     .export_id = get_le(in + 40, 8)};
  memcpy(out->secret, in + 48, AIPC_SECRET_LEN);
  *supernode = get_le(in + 8, 8);
  return ACL_SUCCESS;
}
