/* The wire protocol spoken by hand (docs/design-ipc.md), for tests that
 * play a hostile or broken peer: raw connections, packets built byte by
 * byte, descriptors attached and received. Independent of the runtime's own
 * codec on purpose. Header-only, like ipc_util.h. */
#ifndef ASCEND_IPC_TEST_WIRE_UTIL_H_
#define ASCEND_IPC_TEST_WIRE_UTIL_H_

#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "ipc_util.h"
#include "raw_socket.h"

#define MAGIC 0x43504941u
#define IMPORT_LEN 64

static inline unsigned sockaddr_of(struct sockaddr_un *sa, uint32_t pid, uint64_t nonce) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ascend_ipc.%u.%016llx", pid,
                   (unsigned long long)nonce);
  return (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* A raw connection to the exporter of key, or -1. */
static inline int raw_connect(const char *key) {
  key_rec k = key_decode(key);
  struct sockaddr_un sa;
  unsigned len = sockaddr_of(&sa, k.pid, k.nonce);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline void put_header(uint8_t *b, uint16_t type, uint32_t len, uint64_t req) {
  uint32_t magic = MAGIC;
  uint16_t ver = 1;
  memcpy(b, &magic, 4);
  memcpy(b + 4, &ver, 2);
  memcpy(b + 6, &type, 2);
  memcpy(b + 8, &len, 4);
  memset(b + 12, 0, 4);
  memcpy(b + 16, &req, 8);
}

/* A stand-in exporter: this process listening under a made-up nonce, as a
 * hostile or broken exporter would. Writes a key of export id to key;
 * returns the listening socket. */
static inline int fake_exporter_listen(uint64_t nonce, uint64_t id, char key[KEYLEN]) {
  key_rec k;
  memset(&k, 0, sizeof k);
  CHECK((nonce >> 48) == 0); /* a nonce has 48 bits */
  k.pid = (uint32_t)getpid();
  k.nonce = nonce;
  k.place = own_place();
  k.id = id;
  memset(key, 0, KEYLEN);
  key_encode(&k, key);
  struct sockaddr_un sa;
  unsigned salen = sockaddr_of(&sa, k.pid, k.nonce);
  int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(ls >= 0);
  CHECK(bind(ls, (struct sockaddr *)&sa, salen) == 0);
  CHECK(listen(ls, 16) == 0);
  return ls;
}

/* What every reply starts with: the header's type, length and request id, and
 * the status (the first field of an IMPORT_REPLY's body, and of an ERROR's). */
typedef struct wire_head {
  uint16_t type;
  uint32_t len;
  uint64_t req;
  int32_t status;
} wire_head;

static inline wire_head wire_head_of(const uint8_t *b) {
  wire_head h;
  memcpy(&h.type, b + 6, 2);
  memcpy(&h.len, b + 8, 4);
  memcpy(&h.req, b + 16, 8);
  memcpy(&h.status, b + 24, 4);
  return h;
}

/* IMPORT: flags, sdid and settled all 0 */
static inline size_t pkt_import(uint8_t *b, const key_rec *k, uint64_t req) {
  put_header(b, 1, IMPORT_LEN, req);
  memcpy(b + 24, &k->id, 8);
  memcpy(b + 32, k->secret, 16);
  memset(b + 48, 0, 16);
  return IMPORT_LEN;
}

static inline size_t pkt_release(uint8_t *b, uint64_t id, uint32_t count, uint64_t req) {
  put_header(b, 3, 40, req);
  memcpy(b + 24, &id, 8);
  memcpy(b + 32, &count, 4);
  memset(b + 36, 0, 4);
  return 40;
}


#endif
