/*
 * A lying exporter (docs/design-ipc.md, "An exporter is not trusted
 * either"): a forked child plays an exporter by hand, under its own pid and
 * a nonce it made up, and answers an import with descriptors or fields that
 * an exporter of this library never sends. This process, the importer, must
 * refuse each grant with a code and a message that names the lie, keep no
 * descriptor or mapping it was handed, give the reference back, and import
 * from the same exporter again once it answers honestly.
 *
 * The child acts only on the commands this process sends it on a pipe, so
 * every step (reply, truncate the ledger, read a ledger slot) happens at a
 * known point of the test: no sleeps.
 */
#include "proc_util.h"
#include "wire_util.h"

#include <sys/eventfd.h>
#include <sys/stat.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define SEALED (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) /* what this library's exporter seals */
#define LEDGER_SLOTS 16384u
#define LEDGER_BYTES ((size_t)LEDGER_SLOTS * 4)
#define NO_SLOT 0xffffffffu
#define SEED 0x1ea5u

/* The descriptor a reply carries for the memory or the ledger. */
enum { D_NONE, D_MEMFD, D_PIPE, D_EVENTFD, D_SOCKET, D_TMPFILE, D_HUGE_MEMFD };

typedef struct lie {
  int mem;             /* D_* */
  unsigned mem_seals;  /* for D_MEMFD */
  size_t mem_size;     /* 0: PAGE */
  uint64_t size;       /* claimed; 0: PAGE (physical: the memfd's size) */
  int ledger;          /* D_*; D_NONE: only with the connection's first grant, as the real one */
  unsigned led_seals;  /* for D_MEMFD */
  size_t led_size;     /* 0: LEDGER_BYTES */
  uint32_t slot;       /* 0: the next free slot */
  int extra_fd;        /* one more descriptor than the flags announce */
  int ledger_unflagged; /* the ledger attached but not announced */
  int bad_req;         /* answers a request never sent */
} lie;

static const lie HONEST = {D_MEMFD, SEALED, 0, 0, D_NONE, SEALED, 0, 0, 0, 0, 0};

/* ---- the fake exporter (a child) --------------------------------------------------------- */

enum { CMD_EXIT, CMD_REPLY, CMD_TRUNCATE, CMD_SLOT };

static uint32_t g_place; /* this host's place, as keys carry it: the child's keys need it */

typedef struct fake_state {
  int conn;
  int ledger_sent;    /* on this connection */
  uint32_t next_slot;
  int last_ledger;    /* the last ledger sent, kept to truncate it */
  uint32_t *ledger;   /* its mapping, when it is big enough to read */
  uint32_t last_slot;
} fake_state;

/* A memfd of size bytes, its first page patterned (memory) or zero (a ledger). */
static int memfd_with(size_t size, unsigned seals, int fill) {
  int fd = memfd_create("liar", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
  uint32_t page[PAGE / 4];
  fill_pattern(page, PAGE, SEED);
  if (fill) CHECK(pwrite(fd, page, PAGE, 0) == (ssize_t)PAGE); /* before any write seal */
  if (seals) CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
  return fd;
}

/* A descriptor of kind d; *other gets a second one to close with it (a pipe's other end). */
static int make_fd(int d, unsigned seals, size_t size, int fill, int *other) {
  int p[2];
  *other = -1;
  switch (d) {
    case D_MEMFD: return memfd_with(size, seals, fill);
    case D_PIPE:
      CHECK(pipe2(p, O_CLOEXEC) == 0);
      *other = p[1];
      return p[0];
    case D_EVENTFD: {
      int fd = eventfd(0, EFD_CLOEXEC);
      CHECK(fd >= 0);
      return fd;
    }
    case D_SOCKET:
      CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
      *other = p[1];
      return p[0];
    case D_HUGE_MEMFD: { /* sealed like the real one, in 2 MiB pages (none needed from the pool: never mapped) */
      int fd = memfd_create("liar", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
      CHECK(fd >= 0 && ftruncate(fd, (off_t)((size + (2 * MiB - 1)) & ~(2 * MiB - 1))) == 0);
      if (seals) CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
      return fd;
    }
    case D_TMPFILE: { /* a regular file, but no memfd: no seals at all */
      int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
      if (fd < 0) fd = open(".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
      CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
      return fd;
    }
  }
  return -1;
}

/* Waits for the next IMPORT (on a new connection when the importer dropped
 * the last one); other packets (RELEASE, CANCEL) are read and ignored. */
static uint64_t next_import(int ls, fake_state *s) {
  for (;;) {
    if (s->conn < 0) {
      s->conn = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
      CHECK(s->conn >= 0);
      s->ledger_sent = 0;
    }
    uint8_t b[1024];
    int fds[4], nfd;
    ssize_t r = raw_recv(s->conn, b, sizeof b, fds, &nfd, 0);
    for (int i = 0; i < nfd; i++) close(fds[i]);
    if (r <= 0) {
      close(s->conn);
      s->conn = -1;
      continue;
    }
    if (r == IMPORT_LEN && b[6] == 1) {
      uint64_t req;
      memcpy(&req, b + 16, 8);
      return req;
    }
  }
}

static void reply(int ls, fake_state *s, const lie *l, int physical) {
  uint64_t req = next_import(ls, s);
  int other[3] = {-1, -1, -1};
  size_t mem_size = l->mem_size ? l->mem_size : physical ? 2 * MiB : PAGE; /* physical memory: whole granules */
  int memfd = make_fd(l->mem, l->mem_seals, mem_size, 1, &other[0]);
  int ledger = -1;
  if (!physical && (l->ledger != D_NONE || !s->ledger_sent)) {
    int d = l->ledger != D_NONE ? l->ledger : D_MEMFD;
    size_t led_size = l->led_size ? l->led_size : LEDGER_BYTES;
    ledger = make_fd(d, l->led_seals, led_size, 0, &other[1]);
    s->ledger_sent = 1;
    if (s->last_ledger >= 0) close(s->last_ledger);
    if (s->ledger) munmap(s->ledger, LEDGER_BYTES);
    s->ledger = NULL;
    s->last_ledger = ledger;
    if (d == D_MEMFD && led_size >= LEDGER_BYTES && !(l->led_seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))) {
      void *m = mmap(NULL, LEDGER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ledger, 0);
      CHECK(m != MAP_FAILED);
      s->ledger = m;
    }
  }
  uint32_t slot = physical ? NO_SLOT : l->slot ? l->slot : s->next_slot++;
  s->last_slot = slot;
  uint32_t flags = 1u | (ledger >= 0 && !l->ledger_unflagged ? 2u : 0u);
  uint64_t size = l->size ? l->size : physical ? mem_size : PAGE, offset = 0;
  int32_t status = 0, device = 0;
  uint32_t attr = 0, text_len = 0;
  uint8_t b[64];
  put_header(b, 2, 64, l->bad_req ? req + 1000 : req);
  memcpy(b + 24, &status, 4);
  memcpy(b + 28, &flags, 4);
  memcpy(b + 32, &device, 4);
  memcpy(b + 36, &attr, 4);
  memcpy(b + 40, &offset, 8);
  memcpy(b + 48, &size, 8);
  memcpy(b + 56, &text_len, 4);
  memcpy(b + 60, &slot, 4);
  int fds[3], n = 0;
  fds[n++] = memfd;
  if (ledger >= 0) fds[n++] = ledger;
  if (l->extra_fd) fds[n++] = memfd;
  CHECK(raw_send_fds(s->conn, b, sizeof b, fds, n) == (ssize_t)sizeof b);
  close(memfd);
  for (int i = 0; i < 3; i++)
    if (other[i] >= 0) close(other[i]);
}

typedef struct fake_arg {
  const lie *lie;
  int physical; /* serve a shareable-handle door instead of a process's socket */
} fake_arg;

static int fake_exporter(chan *c, void *argp) {
  child_deadline();
  fake_arg *a = argp;
  char key[KEYLEN] = {0};
  struct sockaddr_un sa;
  unsigned salen;
  if (a->physical) {
    /* a door is named by a number; the importer asks only that a process of its user serves it */
    uint32_t door = (uint32_t)getpid();
    salen = sockaddr_of(&sa, door, 0);
    uint64_t handle = (uint64_t)door << 32 | 0x5eedu;
    memcpy(key, &handle, sizeof handle);
  } else {
    key_rec k;
    memset(&k, 0, sizeof k);
    k.pid = (uint32_t)getpid();
    k.nonce = 0x11a25eedull ^ (uint64_t)getpid(); /* any, but its own: the importer checks the peer's pid */
    k.place = g_place;
    k.id = 7;
    key_encode(&k, key);
    salen = sockaddr_of(&sa, k.pid, k.nonce);
  }
  int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(ls >= 0);
  CHECK(bind(ls, (struct sockaddr *)&sa, salen) == 0);
  CHECK(listen(ls, 16) == 0);
  to_parent(c, key, KEYLEN);
  fake_state s = {.conn = -1, .next_slot = 1, .last_ledger = -1};
  for (;;) {
    int cmd = recv_int(c->down[0]);
    int ans = 0;
    switch (cmd) {
      case CMD_EXIT: _exit(0); /* no leak scan: forked from a process with threads, it could not stop them */
      case CMD_REPLY: reply(ls, &s, a->lie, a->physical); break;
      case CMD_REPLY + 100: reply(ls, &s, &HONEST, a->physical); break;
      case CMD_TRUNCATE: ans = ftruncate(s.last_ledger, 0); break;
      case CMD_SLOT: ans = s.ledger && s.last_slot < LEDGER_SLOTS ? (int)__atomic_load_n(&s.ledger[s.last_slot], __ATOMIC_ACQUIRE) : -1; break;
    }
    send_int(c->up[1], ans);
  }
}

/* ---- the importer (this process) ------------------------------------------------------------ */

typedef enum { K_MEMORY, K_NOTIFY, K_EVENT, K_PHYSICAL } kind;

typedef struct fake {
  chan c;
  int pid;
  kind kind;
  char key[KEYLEN];
  fake_arg arg;
} fake;

static void fake_start(fake *f, const lie *l, kind k) {
  timeout_never(); /* a refusal must come at once, never by waiting out the timeout */
  g_place = own_place();
  f->kind = k;
  f->arg.lie = l;
  f->arg.physical = k == K_PHYSICAL;
  chan_open(&f->c);
  f->pid = chan_spawn(&f->c, fake_exporter, &f->arg);
  from_child(&f->c, f->key, KEYLEN);
  if (k == K_NOTIFY) memcpy(f->key, "aipn2.", 6);
  if (k == K_EVENT) memcpy(f->key, "aipe2.", 6);
}

static int fake_cmd(fake *f, int cmd) {
  send_int(f->c.down[1], cmd);
  return recv_int(f->c.up[0]);
}

static void fake_stop(fake *f) {
  send_int(f->c.down[1], CMD_EXIT);
  CHECK_EQ(th_wait(f->pid), 0);
  chan_close(&f->c);
}

/* One import of f's key; the child answers with an honest grant or with its lie. */
typedef struct imported {
  void *p;
  aclrtNotify notify;
  aclrtEvent event;
  aclrtDrvMemHandle phys;
} imported;

static aclError import_once(fake *f, int honest, imported *im) {
  memset(im, 0, sizeof *im);
  send_int(f->c.down[1], CMD_REPLY + (honest ? 100 : 0));
  aclError rc = ACL_ERROR_INVALID_PARAM;
  switch (f->kind) {
    case K_MEMORY: rc = aclrtIpcMemImportByKey(&im->p, f->key, 0); break;
    case K_NOTIFY: rc = aclrtNotifyImportByKey(&im->notify, f->key, 0); break;
    case K_EVENT: {
      aclrtIpcEventHandle h;
      memset(&h, 0, sizeof h);
      memcpy(h.reserved, f->key, KEY_CHARS);
      rc = aclrtIpcOpenEventHandle(h, &im->event);
      break;
    }
    case K_PHYSICAL: {
      uint64_t handle;
      memcpy(&handle, f->key, sizeof handle);
      rc = aclrtMemImportFromShareableHandle(handle, 0, &im->phys);
      break;
    }
  }
  CHECK_EQ(recv_int(f->c.up[0]), 0); /* the child sent its reply */
  return rc;
}

static void close_import(fake *f, imported *im) {
  switch (f->kind) {
    case K_MEMORY: CHECK_OK(aclrtIpcMemClose(f->key)); break;
    case K_NOTIFY: CHECK_OK(aclrtDestroyNotify(im->notify)); break;
    case K_EVENT: CHECK_OK(aclrtDestroyEvent(im->event)); break;
    case K_PHYSICAL: CHECK_OK(aclrtFreePhysical(im->phys)); break;
  }
}

/* An honest grant works: the memory holds what the exporter wrote, and the
 * close gives the reference back through the ledger. */
static void honest_round(fake *f) {
  imported im;
  CHECK_OK(import_once(f, 1, &im));
  if (f->kind == K_MEMORY) CHECK(check_pattern(im.p, PAGE, SEED));
  close_import(f, &im);
  if (f->kind == K_MEMORY) CHECK_EQ(fake_cmd(f, CMD_SLOT), 1);
}

enum {
  DROPS = 1,      /* the lie leaves the connection untrustworthy: the importer drops it */
  HONEST_FIRST = 2, /* an honest grant first (the connection and its ledger exist before the lie) */
  TRUNCATE = 4,   /* a grant accepted anyway: the exporter cuts the ledger, then the importer closes */
};

/* The importer refuses f's lie with code and a message containing needle,
 * keeps nothing it was handed, and imports from f again once f is honest. */
static void refused(const lie *l, kind k, int how, aclError code, const char *needle) {
  fake f;
  fake_start(&f, l, k);
  proc_snap start;
  /* A dropped connection takes its socket and ledger with it: compare with
   * before the first connection. A kept one keeps them: compare with after
   * the honest round that made it. */
  if (how & DROPS) proc_snap_take(&start, 0);
  if (how & HONEST_FIRST) honest_round(&f);
  if (!(how & DROPS)) proc_snap_take(&start, 0);
  imported im;
  aclError rc = import_once(&f, 0, &im);
  if (rc == ACL_SUCCESS) {
    if (how & TRUNCATE) {
      CHECK_EQ(fake_cmd(&f, CMD_TRUNCATE), 0);
      close_import(&f, &im); /* a write into the cut ledger: SIGBUS */
    }
    th_fail(__FILE__, __LINE__, "the importer accepted the grant");
  }
  th_check_acl(__FILE__, __LINE__, "import of a lying grant", rc, code, needle);
  CHECK(im.p == NULL);
  proc_snap_expect(&start, 0, 0, "importer of a lying exporter");
  proc_snap_free(&start);
  /* the refused grant's reference went back: through the ledger when the
   * connection stays, with the connection's EOF when it went */
  if (k == K_MEMORY && !(how & DROPS) && l->slot == 0) CHECK_EQ(fake_cmd(&f, CMD_SLOT), 1);
  honest_round(&f);
  fake_stop(&f);
  CHECK_OK(aclFinalize());
}

#define IPC_ERR ACL_ERROR_RT_IPC_ERROR

/* ---- the ledger ------------------------------------------------------------------------------ */

/* The critical one: a ledger the exporter can cut under the importer's
 * mapping would kill the importer (SIGBUS) at its next close. */
TEST(ledger_unsealed_then_truncated) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_seals = 0;
  refused(&l, K_MEMORY, DROPS | TRUNCATE, IPC_ERR, "release ledger that is not sealed against shrinking");
}

TEST(ledger_sealed_against_growing_only_then_truncated) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_seals = F_SEAL_GROW | F_SEAL_SEAL;
  refused(&l, K_MEMORY, DROPS | TRUNCATE, IPC_ERR, "release ledger that is not sealed against shrinking");
}

TEST(ledger_can_grow) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_seals = F_SEAL_SHRINK | F_SEAL_SEAL;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that is not sealed against growing");
}

TEST(ledger_smaller_than_its_slots) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_size = PAGE;
  l.slot = 5000; /* beyond the page: a write there would fault */
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that does not have the exact size");
}

TEST(ledger_larger_than_a_ledger) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_size = 2 * LEDGER_BYTES;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that does not have the exact size");
}

TEST(ledger_is_a_pipe) {
  lie l = HONEST;
  l.ledger = D_PIPE;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that is not a memory file");
}

/* A regular file that is no memfd: on tmpfs it reports a seal (F_SEAL_SEAL)
 * and none of the ones asked for, elsewhere none at all. */
static const char *not_memfd_needle(void) {
  int other, fd = make_fd(D_TMPFILE, 0, PAGE, 0, &other);
  int seals = fcntl(fd, F_GET_SEALS);
  close(fd);
  return seals < 0 ? "is not a memfd" : "is not sealed against shrinking";
}

TEST(ledger_is_not_a_memfd) {
  lie l = HONEST;
  l.ledger = D_TMPFILE;
  l.led_size = LEDGER_BYTES;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, not_memfd_needle());
}

/* A ledger's mapping is a page: in a file of 2 MiB pages it could not be unmapped alone. */
TEST(ledger_in_huge_pages) {
  lie l = HONEST;
  l.ledger = D_HUGE_MEMFD;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that is in pages other than 4 KiB");
}

TEST(ledger_write_sealed) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.led_seals = SEALED | F_SEAL_WRITE;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "release ledger that is sealed against writing");
}

TEST(second_ledger_on_a_later_reply) {
  lie l = HONEST;
  l.ledger = D_MEMFD; /* the honest round sent the connection's ledger already */
  refused(&l, K_MEMORY, DROPS | HONEST_FIRST, IPC_ERR, "second release ledger");
}

TEST(ledger_slot_out_of_range) {
  lie l = HONEST;
  l.slot = LEDGER_SLOTS;
  refused(&l, K_MEMORY, DROPS | HONEST_FIRST, IPC_ERR, "slot out of range");
}

TEST(ledger_attached_but_not_announced) {
  lie l = HONEST;
  l.ledger = D_MEMFD;
  l.ledger_unflagged = 1;
  refused(&l, K_MEMORY, DROPS, IPC_ERR, "descriptors missing or unexpected");
}

/* ---- the memory -------------------------------------------------------------------------------- */

TEST(memory_unsealed) {
  lie l = HONEST;
  l.mem_seals = 0;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is not sealed against shrinking");
}

TEST(memory_can_grow) {
  lie l = HONEST;
  l.mem_seals = F_SEAL_SHRINK | F_SEAL_SEAL;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is not sealed against growing");
}

/* Device memory must be writable: a write-sealed memfd cannot be mapped so. */
TEST(memory_write_sealed) {
  lie l = HONEST;
  l.mem_seals = SEALED | F_SEAL_WRITE;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is sealed against writing");
}

TEST(memory_future_write_sealed) {
  lie l = HONEST;
  l.mem_seals = SEALED | F_SEAL_FUTURE_WRITE;
  int probe = memfd_create("probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(probe >= 0);
  int ok = fcntl(probe, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
  close(probe);
  if (!ok) { /* a kernel before 5.1 */
    fprintf(stderr, "  skipped: no F_SEAL_FUTURE_WRITE\n");
    return;
  }
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is sealed against writing");
}

TEST(memory_smaller_than_claimed) {
  lie l = HONEST;
  l.size = 4 * PAGE;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is smaller than the range");
}

TEST(memory_huge_size) {
  lie l = HONEST;
  l.size = (uint64_t)1 << 46;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is smaller than the range");
}

TEST(memory_is_a_pipe) {
  lie l = HONEST;
  l.mem = D_PIPE;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is not a memory file");
}

TEST(memory_is_an_eventfd) {
  lie l = HONEST;
  l.mem = D_EVENTFD;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is not a memory file");
}

TEST(memory_is_a_socket) {
  lie l = HONEST;
  l.mem = D_SOCKET;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, "granted memory that is not a memory file");
}

TEST(memory_is_not_a_memfd) {
  lie l = HONEST;
  l.mem = D_TMPFILE;
  refused(&l, K_MEMORY, HONEST_FIRST, IPC_ERR, not_memfd_needle());
}

TEST(extra_descriptor) {
  lie l = HONEST;
  l.extra_fd = 1;
  refused(&l, K_MEMORY, DROPS | HONEST_FIRST, IPC_ERR, "descriptors missing or unexpected");
}

TEST(reply_to_a_request_never_sent) {
  lie l = HONEST;
  l.bad_req = 1;
  refused(&l, K_MEMORY, DROPS | HONEST_FIRST, IPC_ERR, "reply to a request never sent");
}

/* ---- the other kinds of grant: notify and event state pages, physical memory ---------------- */

TEST(notify_page_can_grow) {
  lie l = HONEST;
  l.mem_seals = F_SEAL_SHRINK | F_SEAL_SEAL;
  refused(&l, K_NOTIFY, HONEST_FIRST, IPC_ERR, "not sealed against growing");
}

TEST(notify_page_unsealed) {
  lie l = HONEST;
  l.mem_seals = 0;
  refused(&l, K_NOTIFY, HONEST_FIRST, IPC_ERR, "not sealed against shrinking");
}

TEST(event_page_can_grow) {
  lie l = HONEST;
  l.mem_seals = F_SEAL_SHRINK | F_SEAL_SEAL;
  refused(&l, K_EVENT, HONEST_FIRST, IPC_ERR, "not sealed against growing");
}

TEST(event_page_in_huge_pages) {
  lie l = HONEST;
  l.mem = D_HUGE_MEMFD;
  refused(&l, K_EVENT, HONEST_FIRST, IPC_ERR, "in pages other than 4 KiB");
}

TEST(event_page_is_an_eventfd) {
  lie l = HONEST;
  l.mem = D_EVENTFD;
  refused(&l, K_EVENT, HONEST_FIRST, IPC_ERR, "not a memory file");
}

TEST(physical_can_grow) {
  lie l = HONEST;
  l.mem_seals = F_SEAL_SHRINK | F_SEAL_SEAL;
  l.mem_size = 2 * MiB;
  refused(&l, K_PHYSICAL, HONEST_FIRST, IPC_ERR, "not sealed against growing");
}

TEST(physical_in_huge_pages) {
  lie l = HONEST;
  l.mem = D_HUGE_MEMFD;
  l.mem_size = 2 * MiB;
  refused(&l, K_PHYSICAL, HONEST_FIRST, IPC_ERR, "in pages other than 4 KiB");
}

TEST(physical_write_sealed) {
  lie l = HONEST;
  l.mem_seals = SEALED | F_SEAL_WRITE;
  l.mem_size = 2 * MiB;
  refused(&l, K_PHYSICAL, HONEST_FIRST, IPC_ERR, "sealed against writing");
}

TEST(physical_is_a_pipe) {
  lie l = HONEST;
  l.mem = D_PIPE;
  refused(&l, K_PHYSICAL, HONEST_FIRST, IPC_ERR, "not a memory file");
}
