/* The emulated super-node: this process's server and the rendezvous (supernode.h). */
#define _GNU_SOURCE
#include "emu/ipc/supernode.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/error.h"
#include "emu/emu.h"
#include "emu/ipc/key.h"
#include "os/os.h"

/* g.lock guards everything; sdid and netns are also read without it once
 * `known` is set (release/acquire). */
static struct supernode {
  pthread_mutex_t lock;
  int known; /* sdid and netns read */
  uint32_t sdid;
  uint64_t netns;
  bool joined; /* join ran: rc and why are its answer */
  aclError rc;
  char why[400];
  uint64_t id;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t netns_of(const char *link) {
  struct stat st;
  return stat(link, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static uint32_t derived_sdid(uint64_t ino) { return ino == AIPC_INIT_NET_INO ? 0 : (uint32_t)ino; }

static void learn(void) {
  if (__atomic_load_n(&g.known, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&g.lock);
  if (!g.known) {
    const aipc__config *cfg = aipc__config_get();
    g.netns = netns_of("/proc/self/ns/net");
    g.sdid = cfg->sdid_set ? cfg->sdid : derived_sdid(g.netns);
    __atomic_store_n(&g.known, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g.lock);
}

uint32_t aipc__server_sdid(void) {
  learn();
  return g.sdid;
}

uint64_t aipc__server_netns(void) {
  learn();
  return g.netns;
}

/* ---- the directory ---------------------------------------------------------------- */

/* Opens the directory, checked: ours, not a symlink, writable by us alone.
 * -1 with g.why and g.rc set. */
static int dir_open(const char *dir) {
  uid_t me = geteuid();
  if (!*dir) {
    g.rc = ACL_ERROR_RT_IPC_ERROR;
    snprintf(g.why, sizeof g.why, "ASCEND_IPC_SUPERNODE_DIR is too long (at most %d characters: the sockets in it "
             "need room in a Unix socket address)", 95);
    return -1;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    g.rc = ACL_ERROR_RT_IPC_ERROR;
    snprintf(g.why, sizeof g.why, "cannot create the super-node directory %s: %s", dir, strerror(errno));
    return -1;
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int e = errno;
  struct stat st;
  if (fd < 0 ? lstat(dir, &st) != 0 : fstat(fd, &st) != 0) {
    g.rc = ACL_ERROR_RT_IPC_ERROR;
    snprintf(g.why, sizeof g.why, "cannot open the super-node directory %s: %s", dir, strerror(fd < 0 ? e : errno));
  } else if (S_ISLNK(st.st_mode)) {
    g.rc = ACL_ERROR_RT_NO_PERMISSION;
    snprintf(g.why, sizeof g.why, "the super-node directory %s is a symbolic link (refused: it must be a directory "
             "of this user's own)", dir);
  } else if (!S_ISDIR(st.st_mode)) {
    g.rc = ACL_ERROR_RT_NO_PERMISSION;
    snprintf(g.why, sizeof g.why, "the super-node directory %s is not a directory", dir);
  } else if (st.st_uid != me) {
    g.rc = ACL_ERROR_RT_NO_PERMISSION;
    snprintf(g.why, sizeof g.why, "the super-node directory %s belongs to uid %u, another user, and this process runs "
             "as uid %u: a super-node is shared only between processes of one user",
             dir, (unsigned)st.st_uid, (unsigned)me);
  } else if (st.st_mode & 022) {
    g.rc = ACL_ERROR_RT_NO_PERMISSION;
    snprintf(g.why, sizeof g.why, "the super-node directory %s is writable by its group or others (mode %03o; "
             "refused: make it 0700)", dir, (unsigned)(st.st_mode & 0777));
  } else if (fd < 0) {
    g.rc = ACL_ERROR_RT_IPC_ERROR;
    snprintf(g.why, sizeof g.why, "cannot open the super-node directory %s: %s", dir, strerror(e));
  } else {
    return fd;
  }
  if (fd >= 0) close(fd);
  return -1;
}

/* Reads a small file of dfd (no symlink, ours): 0 and buf, or -1. */
static int read_small(int dfd, const char *name, char *buf, size_t cap) {
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) n = read(fd, buf, cap - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return 0;
}

/* Writes name atomically (a private file renamed over it; with
 * exclusive, linked only where nothing is yet). 0, or -1 (EEXIST: exclusive
 * and someone was first). */
static int write_small(int dfd, const char *name, const char *text, bool exclusive) {
  char tmp[64];
  snprintf(tmp, sizeof tmp, ".tmp.%d.%s", (int)getpid(), name);
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  bool ok = write(fd, text, len) == (ssize_t)len;
  close(fd);
  int rc = !ok ? -1 : exclusive ? linkat(dfd, tmp, dfd, name, 0) : renameat(dfd, tmp, dfd, name);
  int e = errno;
  unlinkat(dfd, tmp, 0);
  errno = e;
  return rc;
}

/* The super-node's id, created at random by the first process to join. */
static int read_id(int dfd, uint64_t *id) {
  char text[32];
  for (int tries = 0; tries < 2; tries++) {
    if (read_small(dfd, "id", text, sizeof text) == 0) {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(text, &end, 16);
      if (errno || end != text + 16 || (*end && *end != '\n') || v == 0) return -1;
      *id = v;
      return 0;
    }
    uint64_t v = 0;
    while (v == 0)
      if (aipc__random(&v, sizeof v) != 0) return -1;
    snprintf(text, sizeof text, "%016" PRIx64 "\n", v);
    if (write_small(dfd, "id", text, true) != 0 && errno != EEXIST) return -1;
  }
  return -1;
}

/* The registry: "net.<inode>" holds "<sdid> <pid> <start>", the sdid a
 * process set for its network namespace; it counts while that process lives. */
static int registry_read(int dfd, uint64_t ino, uint32_t *sdid) {
  char name[48], text[96];
  snprintf(name, sizeof name, "net.%" PRIu64, ino);
  if (read_small(dfd, name, text, sizeof text) != 0) return -1;
  unsigned long sd;
  int pid;
  unsigned long long start;
  if (sscanf(text, "%lu %d %llu", &sd, &pid, &start) != 3 || pid <= 0) return -1;
  if (!aipc__os_process_alive(pid, start)) return -1;
  *sdid = (uint32_t)sd;
  return 0;
}

static void registry_write(int dfd, uint64_t ino, uint32_t sdid) {
  uint64_t start;
  if (aipc__os_process_start(getpid(), &start) != 0) return;
  char name[48], text[96];
  snprintf(name, sizeof name, "net.%" PRIu64, ino);
  snprintf(text, sizeof text, "%u %d %" PRIu64 "\n", sdid, (int)getpid(), start);
  (void)write_small(dfd, name, text, false);
}

aclError aipc__supernode_join(const char *call) {
  learn();
  pthread_mutex_lock(&g.lock);
  if (!g.joined) {
    g.joined = true;
    g.rc = ACL_SUCCESS;
    int dfd = dir_open(aipc__config_get()->supernode_dir);
    if (dfd >= 0) {
      if (read_id(dfd, &g.id) != 0) {
        g.rc = ACL_ERROR_RT_IPC_ERROR;
        snprintf(g.why, sizeof g.why, "cannot read or create the super-node id in %s (file id)",
                 aipc__config_get()->supernode_dir);
      } else if (aipc__config_get()->sdid_set && g.netns) {
        registry_write(dfd, g.netns, g.sdid);
      }
      close(dfd);
    }
  }
  aclError rc = g.rc;
  char why[sizeof g.why];
  memcpy(why, g.why, sizeof why);
  pthread_mutex_unlock(&g.lock);
  if (rc != ACL_SUCCESS) return aipc__fail(rc, "%s: %s", call, why);
  return ACL_SUCCESS;
}

uint64_t aipc__supernode_id(void) {
  pthread_mutex_lock(&g.lock);
  uint64_t id = g.rc == ACL_SUCCESS ? g.id : 0;
  pthread_mutex_unlock(&g.lock);
  return id;
}

unsigned aipc__supernode_sockaddr(void *out, uint32_t pid, uint64_t nonce) {
  struct sockaddr_un *sa = out;
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  int n = snprintf(sa->sun_path, sizeof sa->sun_path, "%s/%u.%016llx", aipc__config_get()->supernode_dir, pid,
                   (unsigned long long)nonce);
  if (n <= 0 || (size_t)n >= sizeof sa->sun_path) return 0;
  return (unsigned)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

int aipc__supernode_peer(pid_t pid, uint32_t *sdid, bool *same) {
  char link[48];
  snprintf(link, sizeof link, "/proc/%d/ns/net", (int)pid);
  uint64_t ino = netns_of(link);
  if (ino == 0) return -1;
  *same = ino == aipc__server_netns();
  if (*same) {
    *sdid = aipc__server_sdid();
    return 0;
  }
  *sdid = derived_sdid(ino);
  int dfd = open(aipc__config_get()->supernode_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd >= 0) {
    struct stat st;
    if (fstat(dfd, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & 022)) registry_read(dfd, ino, sdid);
    close(dfd);
  }
  return 0;
}

void aipc__supernode_info(uint32_t *sdid, char *dir, size_t dir_cap, uint64_t *id, uint64_t *netns, char *why,
                          size_t why_cap) {
  aclError rc = aipc__supernode_join("supernode_info");
  *sdid = aipc__server_sdid();
  *netns = aipc__server_netns();
  snprintf(dir, dir_cap, "%s", aipc__config_get()->supernode_dir);
  *id = aipc__supernode_id();
  pthread_mutex_lock(&g.lock);
  snprintf(why, why_cap, "%s", rc == ACL_SUCCESS ? "" : g.why);
  pthread_mutex_unlock(&g.lock);
}

void aipc__supernode_atfork_prepare(void) { pthread_mutex_lock(&g.lock); }
void aipc__supernode_atfork_parent(void) { pthread_mutex_unlock(&g.lock); }

void aipc__supernode_atfork_child(void) {
  /* A new process: it may enter another network namespace before its first call. */
  g.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  g.known = 0;
  g.joined = false;
  g.rc = ACL_SUCCESS;
  g.id = 0;
}
