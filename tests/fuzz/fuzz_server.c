/*
 * Fuzz target: the exporter's handling of what importers send it
 * (csrc/emu/ipc/exporter_request.c, driven through its test seams in exporter.h;
 * the whole emulator is linked in as a static library).
 *
 * Setup, once: four live exports (two devices; whitelist on and off), then
 * the server thread is stopped, so this thread is the server and every step
 * is deterministic. Each input is a script for one importer connection (a
 * socketpair whose server end is registered like an accepted connection):
 *
 *   byte 0        who the peer is (low nibble mod 5): the whitelisted pid,
 *                 the exporter's own pid, a stranger, a ghost (a process
 *                 whitelisted on export 1 while it ran, gone since: its
 *                 entry no longer matches), or a sender with no
 *                 credentials; bit 4: another uid. The seam stands in for
 *                 the kernel's SCM_CREDENTIALS; the friend and the stranger
 *                 are real processes (helpers that wait), so their
 *                 whitelist entries bind to their start times
 *   then ops      raw packets, well-formed IMPORT / RELEASE (replayed,
 *                 forged, with descriptors attached), writes into the
 *                 release ledger the exporter shared, service steps, reads
 *                 of the replies, the peer changing its credentials
 *                 mid-connection (a setuid, or the socket handed to another
 *                 process), and the exporter's own calls (close, import of
 *                 its own key, whitelist, attributes) in between
 *
 * Checked after every step: the exporter's books balance (per export,
 * references by connection + its own = the total; every reference is in
 * the map and on a live connection; a closed export lives only while it is
 * referenced), and every reply it sends is a well-formed message carrying
 * exactly the descriptors its flags announce. Checked at the end of each
 * input, when the connection is gone: no reference and no connection is
 * left, every closed export is finished, and each device's free memory is
 * back to where it started (no block stays pinned).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "emu/emu.h"
#include "emu/ipc/exporter.h"
#include "emu/ipc/key.h"
#include "emu/ipc/proto.h"

#include "fuzz_common.h"
#include "../c/raw_socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_EXPORTS 4
#define FZ_KEYLEN 65

typedef struct fz_export {
  void *ptr;
  size_t size;
  int32_t device;
  char key[FZ_KEYLEN];
  uint64_t id;
  uint8_t secret[AIPC_SECRET_LEN];
  int closed;    /* the exporter closed it this input */
  uint32_t self; /* imports of its own key, not yet closed */
  int whitelist; /* DEFAULT exports: bit 0 the friend pid, bit 1 the stranger */
  int asked;     /* genuine IMPORTs (right id and secret) sent for it this input */
} fz_export;

static fz_export fz_ex[FZ_EXPORTS];
static int fz_ready;
static int32_t fz_friend;   /* a pid on the whitelists (a helper process) */
static int32_t fz_stranger; /* a pid on none, until an input puts it there (a helper process) */
static int32_t fz_ghost;     /* whitelisted on export 1 while it ran, then gone (fz_haunt) */
static int fz_haunted;       /* export 1 has its ghost: made when a peer first needs it (forks are slow) */
static size_t fz_free0[2];
static int fz_devnull = -1;

/* A process that waits until the fuzzer ends. */
static pid_t fz_helper(void) {
  pid_t p = fork();
  FUZZ_CHECK(p >= 0);
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) pause();
  }
  return p;
}

/* A new ghost for export x: a process whitelisted while it runs, then gone,
 * so that x's entry names a process that no longer exists. */
static void fz_haunt(fz_export *x) {
  pid_t g = fz_helper();
  FUZZ_CHECK(aipc__emu_ipc_set_import_pid(x->key, &g, 1) == ACL_SUCCESS);
  kill(g, SIGKILL);
  FUZZ_CHECK(waitpid(g, NULL, 0) == g);
  fz_ghost = g;
  fz_haunted = 1;
}

static void fz_export_slot(int i) {
  fz_export *x = &fz_ex[i];
  x->device = i == 2 ? 1 : 0;
  FUZZ_CHECK(aipc__emu_set_device(x->device) == ACL_SUCCESS);
  x->size = AIPC_PAGE_SIZE * (size_t)(1 + i);
  FUZZ_CHECK(aipc__emu_malloc(&x->ptr, x->size, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
  uint64_t flags = i == 1 || i == 3 ? ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT : ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION;
  FUZZ_CHECK(aipc__emu_ipc_get_export_key(x->ptr, x->size, x->key, FZ_KEYLEN, flags) == ACL_SUCCESS);
  x->whitelist = i == 3 ? 0 : 1;
  if (i == 1) FUZZ_CHECK(aipc__emu_ipc_set_import_pid(x->key, &fz_friend, 1) == ACL_SUCCESS);
  if (i == 1) fz_haunted = 0; /* a new export: its ghost comes when a peer needs it */
  aipc__key k;
  FUZZ_CHECK(aipc__key_parse("fuzz", x->key, &k) == ACL_SUCCESS);
  x->id = k.export_id;
  memcpy(x->secret, k.secret, AIPC_SECRET_LEN);
  x->closed = 0;
  x->self = 0;
  FUZZ_CHECK(aipc__emu_set_device(0) == ACL_SUCCESS);
}

static void fz_setup(void) {
  fz_friend = fz_helper();
  fz_stranger = fz_helper();
  setenv("ASCEND_IPC_EMU_DEVICES", "2", 1);
  setenv("ASCEND_IPC_EMU_MEMORY", "64M", 1);
  setenv("ASCEND_IPC_STRICT", "0", 1);
  for (int d = 0; d < 2; d++) { /* every device has its arena before counting */
    void *p;
    size_t tot;
    FUZZ_CHECK(aipc__emu_set_device(d) == ACL_SUCCESS);
    FUZZ_CHECK(aipc__emu_malloc(&p, AIPC_PAGE_SIZE, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    FUZZ_CHECK(aipc__emu_free(p) == ACL_SUCCESS);
    FUZZ_CHECK(aipc__emu_get_mem_info(ACL_HBM_MEM, &fz_free0[d], &tot) == ACL_SUCCESS);
  }
  for (int i = 0; i < FZ_EXPORTS; i++) fz_export_slot(i);
  fz_haunt(&fz_ex[1]);
  /* from here on this thread is the server: one step at a time */
  aipc__exporter_stop_server();
  fz_devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(fz_devnull >= 0);
  fz_ready = 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_setup();
  return 0;
}

/* The exporter's books balance (aipc__exporter_audit). */
static void fz_check_books(void) {
  const char *why = aipc__exporter_audit();
  if (why) fprintf(stderr, "fuzz_server: the exporter's books: %s\n", why);
  FUZZ_CHECK(why == NULL);
}

typedef struct fz_reader {
  const uint8_t *p;
  size_t n;
} fz_reader;

static uint8_t u8(fz_reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
static uint16_t u16(fz_reader *r) { return (uint16_t)(u8(r) | u8(r) << 8); }
static uint32_t u32(fz_reader *r) { return (uint32_t)u16(r) | (uint32_t)u16(r) << 16; }

static void fz_send(int sock, const uint8_t *b, size_t n, int nfds) {
  int fds[2] = {fz_devnull, fz_devnull};
  (void)raw_send_fds(sock, b, n, fds, nfds);
}

typedef struct fz_client {
  int peer;      /* 0 the friend, 1 the exporter itself, 2 the stranger, 3 the ghost, 4 no credentials */
  int other_uid; /* the peer runs as another user */
  int sock;
  uint32_t *ledger;
  uint32_t slots[8];
  int n_slots;
} fz_client;

/* Reads every reply queued for the client and checks it. */
static void fz_read_replies(fz_client *cl) {
  for (;;) {
    uint8_t buf[AIPC_PROTO_MAX];
    int fds[AIPC_PROTO_MAX_FDS], nfd;
    unsigned seen;
    ssize_t r = aipc__proto_recv(cl->sock, buf, MSG_DONTWAIT, fds, &nfd, &seen);
    /* A reset (the exporter closed with input unread) is reported once, before the replies still queued. */
    if (r < 0 && errno == ECONNRESET) continue;
    if (r <= 0) return;
    /* nothing but descriptors, nothing cut: no reply is longer than any message */
    FUZZ_CHECK(seen == 0);
    aipc__msg m;
    const char *why;
    /* the exporter sends only well-formed messages */
    FUZZ_CHECK(aipc__proto_decode(buf, (size_t)r, &m, &why) == AIPC_DECODE_OK);
    FUZZ_CHECK(m.type == AIPC_MSG_IMPORT_REPLY || m.type == AIPC_MSG_ERROR);
    int want = m.type == AIPC_MSG_IMPORT_REPLY ? !!(m.flags & AIPC_REPLY_FD) + !!(m.flags & AIPC_REPLY_LEDGER) : 0;
    FUZZ_CHECK(nfd == want);
    if (m.type == AIPC_MSG_IMPORT_REPLY && m.status == ACL_SUCCESS) {
      int found = -1;
      for (int i = 0; i < FZ_EXPORTS; i++)
        if (m.size == fz_ex[i].size && m.device == fz_ex[i].device) found = i;
      FUZZ_CHECK(found >= 0);
      /* a grant only to whom the rules allow: same user; for a DEFAULT export the
       * exporter itself or a whitelisted pid (never the ghost: its entry names a
       * process that is gone); and only after the right id and secret */
      const fz_export *x = &fz_ex[found];
      FUZZ_CHECK(!cl->other_uid && cl->peer != 4);
      FUZZ_CHECK(x->asked > 0);
      if (found == 1 || found == 3)
        FUZZ_CHECK(cl->peer == 1 || (cl->peer == 0 && (x->whitelist & 1)) || (cl->peer == 2 && (x->whitelist & 2)));
      int next = 0;
      if (m.flags & AIPC_REPLY_FD) {
        struct stat st;
        FUZZ_CHECK(fstat(fds[next], &st) == 0 && (uint64_t)st.st_size >= m.offset + m.size);
        close(fds[next++]);
      }
      if (m.flags & AIPC_REPLY_LEDGER) {
        FUZZ_CHECK(cl->ledger == NULL); /* once per connection */
        void *p = mmap(NULL, AIPC_LEDGER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fds[next], 0);
        FUZZ_CHECK(p != MAP_FAILED);
        cl->ledger = p;
        close(fds[next++]);
      }
      if (m.slot != AIPC_NO_SLOT) cl->slots[cl->n_slots++ % 8] = m.slot;
    } else {
      for (int i = 0; i < nfd; i++) close(fds[i]);
    }
  }
}

static fz_export *fz_pick(fz_reader *r) { return &fz_ex[u8(r) % FZ_EXPORTS]; }

/* The peer byte `who` names; the credentials its messages carry. */
static void fz_identity(fz_client *cl, uint8_t who, pid_t *pid, uid_t *uid) {
  cl->peer = (who & 0x0f) % 5;
  cl->other_uid = (who & 0x10) != 0;
  if (cl->peer == 3 && !fz_haunted && !fz_ex[1].closed) fz_haunt(&fz_ex[1]);
  static const int32_t none = 0;
  const int32_t *pids[5] = {&fz_friend, NULL, &fz_stranger, &fz_ghost, &none};
  *pid = cl->peer == 1 ? getpid() : *pids[cl->peer];
  *uid = cl->other_uid ? geteuid() + 1 : geteuid();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fz_ready) fz_setup();
  fz_reader in = {data, size};
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  fz_client cl = {0, 0, sv[1], NULL, {0}, 0};
  for (int i = 0; i < FZ_EXPORTS; i++) fz_ex[i].asked = 0;

  pid_t peer_pid;
  uid_t peer_uid;
  fz_identity(&cl, u8(&in), &peer_pid, &peer_uid);
  uint64_t conn = aipc__exporter_adopt(sv[0], peer_pid, peer_uid);
  FUZZ_CHECK(conn != 0);

  uint64_t req = 1;
  int steps = 0;
  while (in.n && steps++ < 256) {
    uint8_t op = u8(&in);
    uint8_t b[AIPC_PROTO_MAX + 128];
    memset(b, 0, sizeof b);
    switch (op % 13) {
      case 0: { /* a raw packet */
        size_t n = u16(&in) % (sizeof b);
        for (size_t i = 0; i < n; i++) b[i] = u8(&in);
        fz_send(cl.sock, b, n, 0);
        break;
      }
      case 1:
      case 9: { /* an IMPORT, perhaps forged, replayed, or carrying descriptors */
        fz_export *x = fz_pick(&in);
        uint8_t f = u8(&in);
        aipc__msg m;
        memset(&m, 0, sizeof m);
        m.type = AIPC_MSG_IMPORT;
        m.req = f & 1 ? 1 : req++;
        m.export_id = f & 2 ? x->id + (f >> 4) : x->id;
        memcpy(m.secret, x->secret, AIPC_SECRET_LEN);
        if (f & 4) m.secret[f % AIPC_SECRET_LEN] ^= (uint8_t)(1 + (f >> 3));
        if (m.export_id == x->id && !(f & 4)) x->asked++;
        m.flags = f & 8 ? (uint32_t)(f >> 6) : 0;
        m.sdid = f & 0x40 && f & 0x80 ? 7 : 0;
        m.settled = f & 0x20 ? m.req : 0;
        size_t n = aipc__proto_encode(&m, b);
        fz_send(cl.sock, b, n, op % 13 == 9 ? 1 + (f & 1) : 0);
        break;
      }
      case 2: { /* a RELEASE, or a CANCEL of a recent request */
        fz_export *x = fz_pick(&in);
        uint8_t f = u8(&in);
        aipc__msg m;
        memset(&m, 0, sizeof m);
        if (f & 0x80) {
          m.type = AIPC_MSG_CANCEL;
          m.req = req - 1 - ((f >> 2) & 7);
        } else {
          m.type = AIPC_MSG_RELEASE;
          m.req = req++;
          m.export_id = x->id;
          m.count = f % 4;
        }
        size_t n = aipc__proto_encode(&m, b);
        fz_send(cl.sock, b, n, 0);
        break;
      }
      case 3: { /* a write into the release ledger */
        if (!cl.ledger) break;
        uint8_t f = u8(&in);
        uint32_t slot = f & 1 && cl.n_slots ? cl.slots[(f >> 1) % (cl.n_slots < 8 ? cl.n_slots : 8)]
                                            : (uint32_t)(u16(&in) % AIPC_LEDGER_SLOTS);
        static const uint32_t vals[] = {0, 1, 2, 3, 0x7fffffffu, 0xffffffffu};
        uint32_t v = f & 0x80 ? u32(&in) : vals[(f >> 4) % 6];
        __atomic_store_n(&cl.ledger[slot], v, __ATOMIC_RELEASE);
        break;
      }
      case 4: { /* the server takes a few messages */
        int n = 1 + u8(&in) % 4;
        (void)aipc__exporter_serve(conn, n);
        fz_check_books();
        break;
      }
      case 5:
        fz_read_replies(&cl);
        break;
      case 6: { /* the exporter closes (an import of its own key first) */
        fz_export *x = fz_pick(&in);
        if (x->closed) {
          FUZZ_CHECK(aipc__emu_ipc_close(x->key) == ACL_ERROR_INVALID_PARAM);
          (void)aipc__recent_err_msg();
        } else {
          FUZZ_CHECK(aipc__emu_ipc_close(x->key) == ACL_SUCCESS);
          if (x->self) {
            x->self--;
          } else {
            x->closed = 1;
            FUZZ_CHECK(aipc__emu_free(x->ptr) == ACL_SUCCESS); /* deferred while imported */
          }
        }
        fz_check_books();
        break;
      }
      case 7: { /* the exporter imports its own key */
        fz_export *x = fz_pick(&in);
        void *p = NULL;
        aclError rc = aipc__emu_ipc_import_by_key(&p, x->key, 0);
        if (x->closed) {
          FUZZ_CHECK(rc == ACL_ERROR_RT_IPC_ERROR);
          (void)aipc__recent_err_msg();
        } else {
          FUZZ_CHECK(rc == ACL_SUCCESS && p == x->ptr);
          x->self++;
        }
        break;
      }
      case 8: /* closed exports look at their ledgers */
        aipc__exporter_sweep();
        fz_check_books();
        break;
      case 10:
        if (op / 13 % 2 == 0) { /* the importer half-closes: EOF after what it sent */
          shutdown(cl.sock, SHUT_WR);
        } else { /* its credentials change: what it sent before is served as before */
          (void)aipc__exporter_serve(conn, 1 << 20);
          fz_check_books();
          fz_read_replies(&cl);
          fz_identity(&cl, u8(&in), &peer_pid, &peer_uid);
          aipc__exporter_impersonate(conn, peer_pid, peer_uid);
        }
        break;
      case 11: { /* whitelist and attributes (refused once imported or closed) */
        fz_export *x = fz_pick(&in);
        uint8_t f = u8(&in);
        int32_t pid = f & 1 ? fz_friend : fz_stranger;
        if (f & 2) {
          if (aipc__emu_ipc_set_import_pid(x->key, &pid, 1) == ACL_SUCCESS) x->whitelist |= f & 1 ? 1 : 2;
        } else
          (void)aipc__emu_ipc_set_attr(x->key, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK, (uint64_t)(f >> 2) % 5);
        (void)aipc__recent_err_msg();
        break;
      }
      default: { /* a packet of the right size with random fields */
        uint16_t type = (uint16_t)(1 + u8(&in) % 4);
        size_t n = type == 1 ? 56 : type == 3 ? 40 : 64;
        aipc__msg m;
        memset(&m, 0, sizeof m);
        m.type = type;
        aipc__proto_encode(&m, b);
        for (size_t i = 24; i < n; i++) b[i] = u8(&in);
        b[8] = (uint8_t)n;
        fz_send(cl.sock, b, n, 0);
        break;
      }
    }
  }

  /* the importer goes away: everything it held is dropped */
  fz_read_replies(&cl);
  close(cl.sock);
  bool open = true;
  for (int i = 0; i < 100000 && open; i++) open = aipc__exporter_serve(conn, 64);
  FUZZ_CHECK(!open);
  aipc__exporter_reap();
  fz_check_books();
  aipc__exporter_counts n;
  aipc__exporter_count(&n);
  FUZZ_CHECK(n.connections == 0 && n.references == 0);
  if (cl.ledger) munmap(cl.ledger, AIPC_LEDGER_BYTES);

  /* the exporter ends its own imports; closed exports are finished by now */
  for (int i = 0; i < FZ_EXPORTS; i++)
    while (fz_ex[i].self) {
      FUZZ_CHECK(aipc__emu_ipc_close(fz_ex[i].key) == ACL_SUCCESS);
      fz_ex[i].self--;
    }
  fz_check_books();
  aipc__exporter_count(&n);
  FUZZ_CHECK(n.closing == 0);
  size_t live = 0;
  for (int i = 0; i < FZ_EXPORTS; i++) live += !fz_ex[i].closed;
  FUZZ_CHECK(n.exports == live);
  for (int i = 0; i < FZ_EXPORTS; i++) {
    if (!fz_ex[i].closed) continue;
    fz_export_slot(i);
  }
  /* nothing stays pinned: each device's free memory is what it was */
  for (int d = 0; d < 2; d++) {
    size_t fr, tot, used = 0;
    for (int i = 0; i < FZ_EXPORTS; i++)
      if (fz_ex[i].device == d) used += fz_ex[i].size;
    FUZZ_CHECK(aipc__emu_set_device(d) == ACL_SUCCESS);
    FUZZ_CHECK(aipc__emu_get_mem_info(ACL_HBM_MEM, &fr, &tot) == ACL_SUCCESS);
    FUZZ_CHECK(fr + used == fz_free0[d]);
  }
  FUZZ_CHECK(aipc__emu_set_device(0) == ACL_SUCCESS);
  return 0;
}
