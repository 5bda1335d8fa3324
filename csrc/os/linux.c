/* The platform layer on Linux (see os.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <linux/futex.h>
#include <time.h>
#include <unistd.h>

#include "os/os.h"

/*
 * memfd_create and getrandom go through syscall(): their glibc wrappers
 * (2.27, 2.25) are newer than the oldest glibc the wheels run on (2.17), the
 * system calls themselves older (Linux 3.17). Headers of such a glibc may
 * lack the names below (the seals: os.h); the numbers are the kernel's ABI.
 */
#ifndef SYS_memfd_create
#if defined(__NR_memfd_create)
#define SYS_memfd_create __NR_memfd_create
#elif defined(__x86_64__)
#define SYS_memfd_create 319
#elif defined(__aarch64__)
#define SYS_memfd_create 279
#else
#error "SYS_memfd_create: the number of memfd_create on this architecture is not known here"
#endif
#endif
#ifndef SYS_getrandom
#if defined(__NR_getrandom)
#define SYS_getrandom __NR_getrandom
#elif defined(__x86_64__)
#define SYS_getrandom 318
#elif defined(__aarch64__)
#define SYS_getrandom 278
#else
#error "SYS_getrandom: the number of getrandom on this architecture is not known here"
#endif
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* log2 of the page size, in the flags' top six bits */
#endif

static uint64_t ms_of(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t aipc__os_now_ms(void) { return ms_of(CLOCK_MONOTONIC); }
uint64_t aipc__os_now_ms_coarse(void) { return ms_of(CLOCK_MONOTONIC_COARSE); }

uint64_t aipc__os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int aipc__os_futex_wait(const uint32_t *word, uint32_t expected, int timeout_ms) {
  struct timespec ts, *tp = NULL;
  if (timeout_ms >= 0) {
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
    tp = &ts;
  }
  /* Not FUTEX_PRIVATE: the word may be in a page other processes map. */
  long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, NULL, 0);
  if (r == 0 || errno == EAGAIN) return 0;
  return -1;
}

void aipc__os_futex_wake_all(const uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0); }


int aipc__os_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
  /* The new thread inherits the mask in force while it is created. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(thread, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return e;
}

int aipc__os_memfd(const char *name, bool sealable) {
  unsigned flags = MFD_CLOEXEC | (sealable ? MFD_ALLOW_SEALING : 0);
  return (int)syscall(SYS_memfd_create, name, flags);
}

/* Sizes the memfd, seals it: fd, or -1 and errno with fd closed. */
static int memfd_size_and_seal(int fd, uint64_t size, bool reserve) {
  if (ftruncate(fd, (off_t)size) != 0) goto fail;
  if (reserve) {
    /* A shared hugetlbfs mapping reserves the file's pages in the pool,
     * and the reservation stays with the file after the unmap. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) goto fail;
    munmap(p, size);
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) goto fail;
  return fd;
fail:;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

int aipc__os_memfd_sealed_huge(const char *name, uint64_t size) {
  if (size == 0 || size % AIPC_OS_HUGE_PAGE) {
    errno = EINVAL;
    return -1;
  }
  int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB);
  return fd < 0 ? -1 : memfd_size_and_seal(fd, size, true);
}

int aipc__os_memfd_sealed(const char *name, uint64_t size) {
  int fd = aipc__os_memfd(name, true);
  if (fd < 0) return -1;
  return memfd_size_and_seal(fd, size, false);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* MemAvailable from /proc/meminfo, in bytes; 0 when unknown. */
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "re");
  if (!f) return 0;
  char line[128];
  unsigned long long kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  fclose(f);
  return (uint64_t)kib << 10;
}

bool aipc__os_memory_to_spare(uint64_t size) {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return false;
  uint64_t unit = si.mem_unit ? si.mem_unit : 1, total = (uint64_t)si.totalram * unit, keep = total / 4;
  uint64_t free_now = ((uint64_t)si.freeram + (uint64_t)si.bufferram) * unit;
  if (free_now >= keep && free_now - keep >= size) return true;
  /* MemAvailable counts the page cache the kernel would give up; read at
   * most every 100 ms (a file read per allocation would cost more than
   * most allocations do), less what was promised since. */
  static uint64_t read_ms, avail_then; /* a stale pair costs one more read, nothing worse */
  uint64_t now = aipc__os_now_ms_coarse(), then = __atomic_load_n(&read_ms, __ATOMIC_ACQUIRE);
  uint64_t avail = __atomic_load_n(&avail_then, __ATOMIC_RELAXED);
  if (then == 0 || now - then >= 100) {
    avail = mem_available();
    __atomic_store_n(&avail_then, avail, __ATOMIC_RELAXED);
    __atomic_store_n(&read_ms, now ? now : 1, __ATOMIC_RELEASE);
  }
  if (avail < keep || avail - keep < size) return false;
  __atomic_store_n(&avail_then, avail - size, __ATOMIC_RELAXED); /* racing callers: only less exact */
  return true;
}

int aipc__os_memfd_seed_huge(int fd, uint64_t size) {
  for (uint64_t off = 0; off < size; off += AIPC_OS_HUGE_PAGE)
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)off, 4096) != 0) return -1;
  return 0;
}

int aipc__os_pages_make_huge(void *p, size_t size) { return madvise(p, size, MADV_COLLAPSE); }

int aipc__os_pages_make(void *p, size_t size) { return madvise(p, size, MADV_POPULATE_WRITE); }

int aipc__os_memfd_make_pages(int fd, uint64_t size, bool huge) {
  size_t span = (size_t)size + AIPC_OS_HUGE_PAGE;
  uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return -1;
  uint8_t *a = (uint8_t *)(((uintptr_t)r + AIPC_OS_HUGE_PAGE - 1) & ~(uintptr_t)(AIPC_OS_HUGE_PAGE - 1));
  int rc = -1, e = 0;
  if (mmap(a, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
    bool made = huge && aipc__os_memfd_seed_huge(fd, size) == 0 && aipc__os_pages_make_huge(a, (size_t)size) == 0;
    rc = made ? 0 : aipc__os_pages_make(a, (size_t)size);
  }
  e = errno;
  munmap(r, span);
  errno = e;
  return rc;
}

aipc__os_fd_verdict aipc__os_fd_check_sealed(int fd, uint64_t min_size, bool exact, bool huge_ok, uint64_t *size,
                                             uint64_t *page) {
  struct stat st;
  *size = 0;
  *page = 4096;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return AIPC_FD_NOT_FILE;
  *size = (uint64_t)st.st_size;
  /* A file's mappings go in its pages: hugetlbfs says their size here. */
  uint64_t blk = (uint64_t)st.st_blksize;
  bool pow2 = blk >= 4096 && blk <= ((uint64_t)1 << 30) && (blk & (blk - 1)) == 0;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return AIPC_FD_NOT_MEMFD;
  if (!(seals & F_SEAL_SHRINK)) return AIPC_FD_CAN_SHRINK;
  if (!(seals & F_SEAL_GROW)) return AIPC_FD_CAN_GROW;
  if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) return AIPC_FD_WRITE_SEALED;
  if (blk != 4096 && (!huge_ok || !pow2 || *size % blk != 0)) return AIPC_FD_HUGE_PAGES;
  if (exact && *size != min_size) return AIPC_FD_WRONG_SIZE;
  if (*size < min_size) return AIPC_FD_TOO_SMALL;
  *page = blk;
  return AIPC_FD_OK;
}

const char *aipc__os_fd_verdict_text(aipc__os_fd_verdict v) {
  switch (v) {
#define AIPC_OS_FD_TEXT_(name, text) \
  case AIPC_FD_##name:               \
    return text;
    AIPC_OS_FD_VERDICTS(AIPC_OS_FD_TEXT_)
#undef AIPC_OS_FD_TEXT_
  }
  return "is unusable";
}

void *aipc__os_map_shared(int fd, size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? NULL : p;
}

const char *aipc__os_memfd_error_text(int e, char *buf, size_t cap) {
  if (e == EMFILE || e == ENFILE) return aipc__os_fd_limit_text(buf, cap);
  if (e != ENOSYS) return strerror(e);
  struct utsname u;
  snprintf(buf, cap,
           "memfd_create is not available, and the emulated NPU keeps its memory in memfds: it needs Linux "
           "3.17 or newer (this kernel is %s) and no sandbox that forbids the call; on NPUs, ASCEND_IPC_PROVIDER=cann "
           "does not need it",
           uname(&u) == 0 ? u.release : "unknown");
  return buf;
}

/* Kernels before 3.17 have no getrandom: /dev/urandom serves there, so a
 * process on one gets as far as its first memfd and the error that names it. */
static ssize_t read_urandom(void *buf, size_t n) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read(fd, buf, n);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}

int aipc__os_fill_checked(void *p, int value, size_t n) {
  /* The kernel writes through this process's page tables as it would for a
   * debugger: an unmapped or read-only page is EFAULT, not a signal. */
  static _Thread_local unsigned char chunk[16384];
  memset(chunk, value, sizeof chunk);
  struct iovec local[16];
  for (int i = 0; i < 16; i++) local[i] = (struct iovec){chunk, sizeof chunk};
  char *at = p;
  while (n > 0) {
    size_t want = n < 16 * sizeof chunk ? n : 16 * sizeof chunk;
    struct iovec remote = {at, want};
    ssize_t done = process_vm_writev(getpid(), local, 16, &remote, 1, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (done == 0) {
      errno = EFAULT; /* a partial write stops at the first page it cannot write */
      return -1;
    }
    at += done;
    n -= (size_t)done;
  }
  return 0;
}

ssize_t aipc__os_getrandom(void *buf, size_t n) {
  long r = syscall(SYS_getrandom, buf, n, 0u);
  if (r < 0 && errno == ENOSYS) return read_urandom(buf, n);
  return (ssize_t)r;
}

bool aipc__os_raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return false;
  rl.rlim_cur = rl.rlim_max;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

const char *aipc__os_fd_limit_text(char *buf, size_t cap) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    snprintf(buf, cap,
             "this process is out of file descriptors (RLIMIT_NOFILE is %llu, hard limit %llu; each allocation "
             "and each descriptor in flight needs one): close some, or raise the limit (ulimit -n)",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
  else
    snprintf(buf, cap, "this process or the system is out of file descriptors: close some");
  return buf;
}

ssize_t aipc__os_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags) {
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  union {
    char b[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  if (nfds > 2) {
    errno = EINVAL;
    return -1;
  }
  if (nfds > 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.b;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
  }
  ssize_t r;
  do r = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  return r;
}

ssize_t aipc__os_recv_fds_from(int sock, void *buf, size_t cap, int flags, int fds[AIPC_OS_FDS_MAX], int *nfds,
                               unsigned *seen, aipc__os_sender *from) {
  /* Room for both: the credentials a SO_PASSCRED socket always gets, and
   * the descriptors a peer may attach (more than fit is MSG_CTRUNC). */
  union {
    char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * AIPC_OS_FDS_MAX)];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {buf, cap};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.b;
  mh.msg_controllen = sizeof ctl.b;
  *nfds = 0;
  *seen = 0;
  if (from) memset(from, 0, sizeof *from);
  ssize_t r = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
  if (r < 0) return r;
  bool got_cred = false;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS && from && !got_cred &&
        cm->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
      struct ucred cr;
      memcpy(&cr, CMSG_DATA(cm), sizeof cr);
      from->pid = cr.pid;
      from->uid = cr.uid;
      from->gid = cr.gid;
      got_cred = true;
      continue;
    }
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
      *seen |= AIPC_RECV_ODD;
      continue;
    }
    size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
      if (*nfds < AIPC_OS_FDS_MAX)
        fds[(*nfds)++] = f;
      else
        close(f);
    }
  }
  if (mh.msg_flags & MSG_TRUNC) *seen |= AIPC_RECV_ODD;
  if (mh.msg_flags & MSG_CTRUNC) *seen |= AIPC_RECV_FDS_DROPPED;
  return r;
}

ssize_t aipc__os_recv_fds(int sock, void *buf, size_t cap, int flags, int fds[AIPC_OS_FDS_MAX], int *nfds,
                          unsigned *seen) {
  return aipc__os_recv_fds_from(sock, buf, cap, flags, fds, nfds, seen, NULL);
}

int aipc__os_peer_cred(int sock, pid_t *pid, uid_t *uid) {
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) return -1;
  *pid = cr.pid;
  *uid = cr.uid;
  return 0;
}

int aipc__os_pass_credentials(int sock) {
  int one = 1;
  return setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
}

void aipc__os_close_after_reply(int sock) {
  shutdown(sock, SHUT_RDWR);
  /* After the shutdown the peer cannot queue more. Without a control
   * buffer, descriptors it attached are dropped, not installed. A peer that
   * queued more than a well-behaved one would (one request per thread) gets
   * the reset: no one makes us drain its whole send buffer. */
  char b[1];
  for (int i = 0; i < 64; i++) {
    ssize_t r = recv(sock, b, sizeof b, MSG_DONTWAIT | MSG_TRUNC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
  }
  close(sock);
}

/* After the last ')': the command name may hold spaces and parentheses. */
static int parse_start(const char *text, size_t len, uint64_t *start, char *state) {
  const char *p = memrchr(text, ')', len);
  if (!p) return -1;
  const char *end = text + len;
  p++;
  /* fields 3 (state) ... 22 (starttime): skip 19, read the 20th */
  for (int field = 3; field <= 22; field++) {
    while (p < end && *p == ' ') p++;
    if (p == end) return -1;
    const char *tok = p;
    while (p < end && *p != ' ' && *p != '\n') p++;
    if (field == 3) *state = *tok;
    if (field < 22) continue;
    uint64_t v = 0;
    for (const char *q = tok; q < p; q++) {
      if (*q < '0' || *q > '9' || v > (UINT64_MAX - 9) / 10) return -1;
      v = v * 10 + (uint64_t)(*q - '0');
    }
    if (p == tok) return -1;
    *start = v;
    return 0;
  }
  return -1;
}

/* Start time and state (R, S, Z, ...) of process pid, from /proc/<pid>/stat. */
static int process_stat(pid_t pid, uint64_t *start, char *state) {
  if (pid <= 0) {
    errno = ESRCH;
    return -1;
  }
  char path[48];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    /* No such entry: the process does not exist, unless /proc is not there at all. */
    if (e == ENOENT) e = access("/proc/self/stat", R_OK) == 0 ? ESRCH : ENOSYS;
    errno = e;
    return -1;
  }
  char text[2048]; /* 52 numeric fields and the name; a full buffer is an error */
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, text + len, sizeof text - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      errno = e; /* ESRCH: the process went between open and read */
      return -1;
    }
    if (r == 0 || (len += (size_t)r) == sizeof text) break;
  }
  close(fd);
  if (len == sizeof text || parse_start(text, len, start, state) != 0) {
    errno = EPROTO;
    return -1;
  }
  return 0;
}

int aipc__os_process_start(pid_t pid, uint64_t *start) {
  char state;
  return process_stat(pid, start, &state);
}

int aipc__os_poller_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int aipc__os_poller_add(int poller, int fd, void *tag) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
  return epoll_ctl(poller, EPOLL_CTL_ADD, fd, &ev);
}

void aipc__os_poller_del(int poller, int fd) { (void)epoll_ctl(poller, EPOLL_CTL_DEL, fd, NULL); }

int aipc__os_poller_wait(int poller, void **tags, int max, int timeout_ms) {
  struct epoll_event evs[64];
  if (max > 64) max = 64;
  int n = epoll_wait(poller, evs, max, timeout_ms);
  for (int i = 0; i < n; i++) tags[i] = evs[i].data.ptr;
  return n < 0 ? 0 : n;
}

bool aipc__os_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) != 0; /* -1 too: the blocking call that follows reports it */
}

int aipc__os_cpus_online(void) {
  static int n; /* 0: not asked yet; a race asks twice and stores the same */
  int v = __atomic_load_n(&n, __ATOMIC_RELAXED);
  if (v == 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    v = c > 0 ? (int)c : 1;
    __atomic_store_n(&n, v, __ATOMIC_RELAXED);
  }
  return v;
}

void aipc__os_yield(void) { sched_yield(); }

int aipc__os_waker_create(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

void aipc__os_waker_wake(int waker) {
  uint64_t one = 1;
  ssize_t w = write(waker, &one, sizeof one);
  (void)w; /* a full counter already wakes the poller */
}

void aipc__os_waker_drain(int waker) {
  uint64_t v;
  ssize_t r = read(waker, &v, sizeof v);
  (void)r;
}

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int aipc__os_peer_pidfd(int sock, pid_t pid) {
  int fd = -1;
  socklen_t len = sizeof fd;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0) return fd;
  if (errno == ESRCH) return -1; /* the peer has ended already */
  /* Older kernels: the process with that pid now. pidfd_open's fds are
   * close-on-exec. */
  return (int)syscall(SYS_pidfd_open, pid, 0);
}

bool aipc__os_pidfd_ended(int pidfd) {
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  int n;
  while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR) {
  }
  return n != 0; /* readable once the process ended; an error counts as ended */
}

bool aipc__os_process_alive(pid_t pid, uint64_t start) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  uint64_t now;
  char state = '?';
  if (process_stat(pid, &now, &state) != 0) return errno != ESRCH; /* unreadable: assume alive */
  return now == start && state != 'Z' && state != 'X'; /* a zombie runs nothing more */
}

static uint64_t namespace_id(const char *link) {
  struct stat st;
  if (stat(link, &st) != 0) return 0;
  return (uint64_t)st.st_dev << 32 ^ (uint64_t)st.st_ino;
}

uint64_t aipc__os_pid_namespace(void) { return namespace_id("/proc/self/ns/pid"); }
uint64_t aipc__os_net_namespace(void) { return namespace_id("/proc/self/ns/net"); }

/* Read once, at load while descriptors are to spare, and again only if that
 * failed: a process at its descriptor limit still knows its host. */
static uint64_t host_boot;

static uint64_t read_host_boot(void) {
  char text[64];
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text);
  close(fd);
  if (n <= 0) return 0;
  uint64_t h = 0xcbf29ce484222325u; /* FNV-1a: spreads the text's bits over all 64 */
  for (ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001b3u;
  return h;
}

__attribute__((constructor)) static void host_boot_at_load(void) {
  __atomic_store_n(&host_boot, read_host_boot(), __ATOMIC_RELAXED);
}

uint64_t aipc__os_host_boot(void) {
  uint64_t h = __atomic_load_n(&host_boot, __ATOMIC_RELAXED);
  if (h == 0) {
    h = read_host_boot();
    __atomic_store_n(&host_boot, h, __ATOMIC_RELAXED);
  }
  return h;
}
