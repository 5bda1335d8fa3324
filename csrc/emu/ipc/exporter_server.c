/*
 * Exporter side, the server (exporter_internal.h): the abstract Unix socket
 * importers connect to (and the door shareable handles are imported
 * through), the server thread that accepts and serves them, and its start,
 * stop, finalize and fork.
 *
 * Every socket operation of the server happens under the exporter lock and
 * never blocks (MSG_DONTWAIT): the thread waits on its poller with the lock
 * released, then takes it and serves what is ready.
 *
 * Who is served is decided from what the kernel says: the peer's uid at
 * accept (SO_PEERCRED; other users are refused there), then the sender of
 * every request (exporter_request.c). docs/design-ipc.md, "Security model".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "emu/ipc/exporter_internal.h"
#include "emu/ipc/identity.h"
#include "emu/ipc/proto.h"
#include "emu/ipc/spin.h"
#include "emu/ipc/supernode.h"

/* The server; the exporter lock guards it. */
static struct exporter_server {
  bool server_running;
  bool stop;
  pthread_t thread;
  int listen_fd, wake_fd;
  int door_fd;   /* the socket shareable handles are imported through, once one is issued */
  uint32_t door; /* its random number (the top half of every shareable handle), 0 before; read without the lock */
  bool listen_paused;
  int sn_fd;          /* the socket in the super-node directory, once bound */
  char sn_path[108];  /* its path, unlinked when it closes (not by a forked child) */
} g = {
    .listen_fd = -1,
    .door_fd = -1,
    .sn_fd = -1,
    .wake_fd = -1,
};

static char listen_tag, door_tag, wake_tag, sn_tag; /* epoll data of the non-connection fds */

/* Until when the server thread polls because a request is on its way
 * (aipc__exporter_expect_request), and whether it sleeps in its poller: each
 * side writes its word, then reads the other's (sequentially consistent),
 * so an expectation either finds the thread awake or wakes it. */
static _Atomic uint64_t g_expect_until_ns;
static _Atomic int g_server_sleeps;
static _Atomic uint64_t g_expected_waits; /* waits that polled for an expected request */

#define LISTEN_BACKLOG 4096
/* Connections one process may hold open to this exporter. An importer needs
 * one (every thread shares it; a lost one is closed before the next); the
 * cap keeps a runaway or hostile process from taking the exporter's
 * descriptors, which aclrtMalloc and other importers need. */
#define PEER_CONNS_MAX 64

/* ---- accept, serve ------------------------------------------------------------ */

/* Refuses a connection as soon as it is accepted: one ERROR, with request id
 * 0 since no request was read (it answers whatever the peer asked), then
 * closed so that the peer still reads it. The peer gets no record, no
 * ledger, nothing that outlives this call. */
static void refuse_at_accept(int fd, aclError status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse_at_accept(int fd, aclError status, const char *fmt, ...) {
  char text[AIPC_PROTO_TEXT_MAX + 1];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  aipc__msg m;
  aipc__msg_error(&m, 0, status, "%s", text);
  uint8_t buf[AIPC_PROTO_MAX];
  size_t len = aipc__proto_encode(&m, buf);
  (void)aipc__os_send_fds(fd, buf, len, NULL, 0, MSG_DONTWAIT); /* a fresh socket has room */
  aipc__os_close_after_reply(fd);
}

static void accept_all(int listen_fd, bool remote) {
  for (int i = 0; i < 64; i++) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: stop listening for a while instead of spinning. */
        aipc__os_poller_del(aipc__exporter_poller(), g.listen_fd);
        if (g.door_fd >= 0) aipc__os_poller_del(aipc__exporter_poller(), g.door_fd);
        if (g.sn_fd >= 0) aipc__os_poller_del(aipc__exporter_poller(), g.sn_fd);
        g.listen_paused = true;
      }
      return;
    }
    pid_t pid;
    uid_t uid;
    aipc__sconn *c = NULL;
    if (aipc__os_peer_cred(fd, &pid, &uid) != 0) {
      close(fd);
      continue;
    }
    /* Other users are refused before they cost anything; so are a process's
     * connections beyond the cap. */
    if (uid != aipc__exporter_me->euid) {
      refuse_at_accept(fd, ACL_ERROR_RT_NO_PERMISSION,
                       "process %d runs as uid %u but the exporter (process %d) runs as uid %u: "
                       "IPC memory is shared only between processes of the same user",
                       (int)pid, (unsigned)uid, (int)aipc__exporter_me->pid, (unsigned)aipc__exporter_me->euid);
      continue;
    }
    if (aipc__sconns_of(pid) >= PEER_CONNS_MAX) {
      refuse_at_accept(fd, ACL_ERROR_RT_IPC_ERROR,
                       "process %d already has %d connections open to exporter process %d, the most one process "
                       "may have (an importer needs one): connection refused",
                       (int)pid, PEER_CONNS_MAX, (int)aipc__exporter_me->pid);
      continue;
    }
    /* The process that connected, which alone this connection serves. */
    int pidfd = aipc__os_peer_pidfd(fd, pid);
    if (pidfd < 0 && errno == ESRCH) { /* it has ended already */
      close(fd);
      continue;
    }
    if (!(c = aipc__sconn_add(fd, pid, uid, pidfd))) {
      if (pidfd >= 0) close(pidfd);
      close(fd);
      continue;
    }
    c->remote = remote;
    if (aipc__os_poller_add(aipc__exporter_poller(), fd, c) != 0) {
      aipc__sconn_kill(c); /* closes fd */
      continue;
    }
  }
}

/* Either socket may already be back (a resume that failed half way). */
static bool poll_again(int fd, void *tag) { return aipc__os_poller_add(aipc__exporter_poller(), fd, tag) == 0 || errno == EEXIST; }

static void resume_listen(void) {
  if (!poll_again(g.listen_fd, &listen_tag)) return;
  if (g.door_fd >= 0 && !poll_again(g.door_fd, &door_tag)) return;
  if (g.sn_fd >= 0 && !poll_again(g.sn_fd, &sn_tag)) return;
  g.listen_paused = false;
}

static void *server_main(void *arg) {
  /* Running: from here on this thread allocates only under the lock, which a
   * fork's prepare handler holds, so a forked child never inherits an
   * allocator lock held by it (glibc's malloc handles that itself; the
   * sanitizers' allocators do not). */
  sem_post((sem_t *)arg);
  void *tags[64];
  aipc__spin spin = {0}; /* this thread's alone */
  for (;;) {
    /* listen_paused is written only by this thread while it runs. */
    /* The closing list only changes under the lock, and its first entry wakes us. */
    int timeout = g.listen_paused ? 50 : -1;
    if (aipc__exporter_closing()) timeout = AIPC_SWEEP_MS;
    /* Only the steady wait learns and polls: the others are timed on purpose. */
    uint64_t start = aipc__os_now_ns(), until = timeout < 0 ? aipc__spin_until(&spin, start) : 0;
    int n = 0;
    bool expected = false;
    for (;;) {
      if (until)
        while ((n = aipc__os_poller_wait(aipc__exporter_poller(), tags, 64, 0)) == 0 && aipc__spin_again(until)) {
        }
      if (n != 0) break;
      /* Before sleeping: a request announced to be on its way is polled
       * for, however long the learnt window (it says nothing of this one). */
      atomic_store(&g_server_sleeps, 1);
      uint64_t expect = atomic_load(&g_expect_until_ns), now = aipc__os_now_ns();
      if (timeout < 0 && expect > now && expect > until && aipc__os_cpus_online() > 1) {
        atomic_store(&g_server_sleeps, 0);
        until = expect;
        expected = true;
        atomic_fetch_add_explicit(&g_expected_waits, 1, memory_order_relaxed);
        continue;
      }
      n = aipc__os_poller_wait(aipc__exporter_poller(), tags, 64, timeout);
      atomic_store(&g_server_sleeps, 0);
      break;
    }
    if (timeout < 0 && n > 0 && !expected) aipc__spin_learn(&spin, aipc__os_now_ns() - start);
    aipc__exporter_lock();
    if (g.stop) {
      aipc__exporter_unlock();
      break;
    }
    if (g.listen_paused) resume_listen();
    for (int i = 0; i < n; i++) {
      void *tag = tags[i];
      if (tag == &listen_tag) {
        accept_all(g.listen_fd, false);
      } else if (tag == &door_tag) {
        accept_all(g.door_fd, false);
      } else if (tag == &sn_tag) {
        accept_all(g.sn_fd, true);
      } else if (tag == &wake_tag) {
        aipc__os_waker_drain(g.wake_fd);
      } else {
        /* One message per wake-up: the poller is level-triggered, and reading
         * on until EAGAIN would cost an extra recvmsg per request. */
        aipc__sconn *c = tag;
        if (!c->dead) aipc__sconn_service(c, 1);
      }
    }
    if (aipc__exporter_closing()) aipc__sconns_sweep();
    aipc__sconns_reap();
    aipc__exporter_unlock();
  }
  return NULL;
}

/* ---- start, stop, fork ------------------------------------------------------- */

/* Closes the super-node socket; unlink: its file too (not a forked
 * child's copy: the name is the parent's). */
static void sn_close(bool unlink_it) {
  if (g.sn_fd < 0) return;
  if (unlink_it && g.sn_path[0]) unlink(g.sn_path);
  close(g.sn_fd);
  g.sn_fd = -1;
  g.sn_path[0] = '\0';
}

static void close_fds(void) {
  sn_close(true);
  if (g.listen_fd >= 0) close(g.listen_fd);
  if (g.door_fd >= 0) close(g.door_fd);
  g.door_fd = -1;
  __atomic_store_n(&g.door, 0, __ATOMIC_RELEASE);
  aipc__exporter_poller_close();
  if (g.wake_fd >= 0) close(g.wake_fd);
  g.listen_fd = g.wake_fd = -1;
}

/* Makes the bound socket fd a listener whose every packet carries its
 * sender's credentials (checked per request). 0, or -1 with errno and *what. */
static int start_listening(int fd, const char **what) {
  *what = "setsockopt(SO_PASSCRED)";
  if (aipc__os_pass_credentials(fd) != 0) return -1;
  *what = "listen";
  return listen(fd, LISTEN_BACKLOG);
}

aclError aipc__exporter_start(const char *call) {
  if (g.server_running) return ACL_SUCCESS;
  g.listen_fd = g.wake_fd = g.door_fd = -1; /* and the poller's, -1 whenever the server is down */
  const char *what = "socket";
  g.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (g.listen_fd < 0) goto fail;
  /* A fresh name at every start: the last one was listed for every user to
   * read, and anyone may hold it now. One in use is drawn again. */
  for (int tries = 0;; tries++) {
    what = "getrandom";
    if (aipc__exporter_take_name() != 0) goto fail;
    struct sockaddr_un sa;
    unsigned salen = aipc__self_sockaddr(&sa, aipc__exporter_me->pid, aipc__exporter_me->nonce);
    what = "bind";
    if (bind(g.listen_fd, (struct sockaddr *)&sa, salen) == 0) break;
    if (errno != EADDRINUSE || tries == 16) goto fail;
  }
  if (start_listening(g.listen_fd, &what) != 0) goto fail;
  what = "epoll_create1";
  if (aipc__exporter_poller_open() != 0) goto fail;
  what = "eventfd";
  g.wake_fd = aipc__os_waker_create();
  if (g.wake_fd < 0) goto fail;
  what = "epoll_ctl";
  if (aipc__os_poller_add(aipc__exporter_poller(), g.listen_fd, &listen_tag) != 0) goto fail;
  if (aipc__os_poller_add(aipc__exporter_poller(), g.wake_fd, &wake_tag) != 0) goto fail;

  g.stop = false;
  g.listen_paused = false;
  sem_t started;
  sem_init(&started, 0, 0);
  int rc = aipc__os_thread_start(&g.thread, server_main, &started);
  if (rc != 0) {
    sem_destroy(&started);
    errno = rc;
    what = "pthread_create";
    goto fail;
  }
  while (sem_wait(&started) != 0 && errno == EINTR) {
  }
  sem_destroy(&started);
  g.server_running = true;
  return ACL_SUCCESS;
fail:;
  int e = errno;
  close_fds();
  return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot start the IPC server of process %d: %s: %s", call,
                    (int)aipc__exporter_me->pid, what, strerror(e));
}

/* Stops and joins the server thread. The lock not held. */
static void server_stop_thread(void) {
  aipc__exporter_lock();
  if (!g.server_running || g.stop) {
    aipc__exporter_unlock();
    return;
  }
  g.stop = true;
  pthread_t t = g.thread;
  aipc__os_waker_wake(g.wake_fd);
  aipc__exporter_unlock();
  pthread_join(t, NULL);
}

/* After server_stop_thread: closes, unpins and frees everything. The lock held. */
static void server_clear(void) {
  aipc__sconns_clear();
  aipc__exporter_table_clear(true);
  close_fds();
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}

/* A forked child: forget, close fds, free. */
static void server_child_reset(void) {
  sn_close(false);
  aipc__sconns_child_reset();
  aipc__exporter_table_clear(false);
  close_fds(); /* the listening socket above all: it must not keep the parent's name alive */
  g.server_running = false;
  g.stop = false;
  g.listen_paused = false;
}

/* Opens the door: a second listening socket, named by a random number
 * that every shareable handle of this process carries (a 64-bit handle has
 * no room for the process's nonce). Nobody can take the name first without
 * guessing it; a name in use (another process drew the same number) is
 * drawn again. The importer checks that the door is served by a process of
 * its user, and the server treats both sockets alike. The lock held, server
 * running. */
aclError aipc__exporter_door_open(const char *call) {
  if (g.door_fd >= 0) return ACL_SUCCESS;
  const char *what = "socket";
  uint32_t door = 0;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) goto fail;
  for (int tries = 0;; tries++) {
    what = "getrandom";
    door = 0;
    while (door == 0)
      if (aipc__random(&door, sizeof door) != 0) goto fail;
    what = "bind";
    struct sockaddr_un sa;
    unsigned salen = aipc__self_sockaddr(&sa, door, 0);
    if (bind(fd, (struct sockaddr *)&sa, salen) == 0) break;
    if (errno != EADDRINUSE || tries == 16) goto fail;
  }
  if (start_listening(fd, &what) != 0) goto fail;
  what = "epoll_ctl";
  /* While accepting is paused for lack of descriptors, resume_listen adds it. */
  if (!g.listen_paused && aipc__os_poller_add(aipc__exporter_poller(), fd, &door_tag) != 0) goto fail;
  g.door_fd = fd;
  __atomic_store_n(&g.door, door, __ATOMIC_RELEASE);
  return ACL_SUCCESS;
fail:;
  int e = errno;
  if (fd >= 0) close(fd);
  return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot open the shareable-handle socket of process %d: %s: %s", call,
                    (int)aipc__exporter_me->pid, what, strerror(e));
}

/* At exit the socket's file goes with the process (a killed one leaves it:
 * the next exporter to bind there removes the files of dead processes). */
static void sn_atexit(void) {
  if (g.sn_fd >= 0 && g.sn_path[0]) unlink(g.sn_path);
}

/* Removes the sockets of processes that are gone from the directory. */
static void sn_sweep(void) {
  DIR *d = opendir(aipc__config_get()->supernode_dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    unsigned pid;
    unsigned long long nonce;
    int used = 0;
    if (sscanf(de->d_name, "%u.%16llx%n", &pid, &nonce, &used) != 2 || de->d_name[used] != '\0' || pid == 0 ||
        pid > INT32_MAX)
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode))
      unlinkat(dirfd(d), de->d_name, 0);
  }
  closedir(d);
}

aclError aipc__exporter_supernode_open(const char *call) {
  if (g.sn_fd >= 0) return ACL_SUCCESS;
  static bool atexit_set;
  if (!atexit_set) atexit_set = atexit(sn_atexit) == 0;
  const char *what = "socket";
  struct sockaddr_un sa;
  unsigned salen = aipc__supernode_sockaddr(&sa, aipc__exporter_me->pid, aipc__exporter_me->nonce);
  int fd = -1;
  if (salen == 0) {
    errno = ENAMETOOLONG;
    what = "the super-node directory's path";
    goto fail;
  }
  sn_sweep();
  fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) goto fail;
  what = "bind";
  /* The name holds this start's random nonce: a file there is a dead
   * process's leftover (a pid given again), never a live exporter's. */
  if (bind(fd, (struct sockaddr *)&sa, salen) != 0) {
    if (errno != EADDRINUSE || unlink(sa.sun_path) != 0 || bind(fd, (struct sockaddr *)&sa, salen) != 0) goto fail;
  }
  snprintf(g.sn_path, sizeof g.sn_path, "%s", sa.sun_path);
  if (start_listening(fd, &what) != 0) goto fail;
  what = "epoll_ctl";
  if (!g.listen_paused && aipc__os_poller_add(aipc__exporter_poller(), fd, &sn_tag) != 0) goto fail;
  g.sn_fd = fd;
  return ACL_SUCCESS;
fail:;
  int e = errno;
  if (fd >= 0) {
    if (g.sn_path[0]) unlink(g.sn_path);
    close(fd);
  }
  g.sn_path[0] = '\0';
  return aipc__fail(ACL_ERROR_RT_IPC_ERROR, "%s: cannot open the super-node socket of process %d in %s: %s: %s", call,
                    (int)aipc__exporter_me->pid, aipc__config_get()->supernode_dir, what, strerror(e));
}

uint32_t aipc__exporter_door(void) { return __atomic_load_n(&g.door, __ATOMIC_ACQUIRE); }

void aipc__exporter_wake(void) {
  if (g.wake_fd >= 0) aipc__os_waker_wake(g.wake_fd);
}

uint64_t aipc__exporter_expected_waits(void) { return atomic_load_explicit(&g_expected_waits, memory_order_relaxed); }

void aipc__exporter_expect_request(void) {
  uint64_t window = (uint64_t)aipc__config_get()->poll_us * 1000u * AIPC_EXPECT_WINDOWS;
  if (window == 0 || !__atomic_load_n(&g.server_running, __ATOMIC_ACQUIRE)) return;
  uint64_t until = aipc__os_now_ns() + window;
  if (until > atomic_load(&g_expect_until_ns)) atomic_store(&g_expect_until_ns, until);
  /* Woken now, the thread's wake-up overlaps the request's journey. */
  if (!atomic_load(&g_server_sleeps)) return;
  aipc__exporter_lock(); /* the waker lives while the server runs */
  if (g.server_running && !g.stop) aipc__exporter_wake();
  aipc__exporter_unlock();
}

/* ---- finalize, fork ------------------------------------------------------------- */

void aipc__exporter_finalize(void) {
  server_stop_thread();
  aipc__exporter_lock();
  server_clear();
  aipc__exporter_unlock();
}

void aipc__exporter_atfork_prepare(void) { aipc__exporter_lock(); }

void aipc__exporter_atfork_parent(void) { aipc__exporter_unlock(); }

void aipc__exporter_atfork_child(void) {
  aipc__exporter_lock_reset();
  server_child_reset();
  aipc__exporter_forget_name();
}

/* ---- seam for the fuzz target and white-box tests ------------------------------ */

void aipc__exporter_stop_server(void) { server_stop_thread(); }
