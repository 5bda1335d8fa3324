/* Snapshots of a process's descriptors and memory mappings (/proc/<pid>/fd,
 * /proc/<pid>/maps), for tests that promise "everything back to where it
 * started": the load test (test_ipc_stress.c) and the fault tests
 * (test_ipc_resilience.c). Header-only, like ipc_util.h. */
#ifndef ASCEND_IPC_TEST_PROC_UTIL_H_
#define ASCEND_IPC_TEST_PROC_UTIL_H_

#include "ipc_util.h"

#include <limits.h>
#include <stdio.h>

/* Small enough that the buffers come from the heap, not from mmap: a
 * snapshot must not change the mapping count it measures. */
#define PS_MAX_FDS 1024
#define PS_MAX_MEMFD 256

/* The total number of mappings is compared only without sanitizers and
 * valgrind, whose allocators map memory of their own as they go. */
#if defined(__SANITIZE_ADDRESS__)
#define PS_COUNT_MAPS_ 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_COUNT_MAPS_ 0
#endif
#endif
#ifndef PS_COUNT_MAPS_
#define PS_COUNT_MAPS_ 1
#endif
static inline int ps_count_maps_(void) { return PS_COUNT_MAPS_ && !under_valgrind(); }

/* What a process holds: every descriptor (number and what it points to),
 * and its mappings: how many, and the memfd-backed ones (device arenas,
 * imported windows, release ledgers: everything ascend_ipc maps) in full. */
typedef struct proc_snap {
  int n_fds;
  int fd[PS_MAX_FDS];
  char (*fd_target)[64];
  int n_maps;
  int n_anchors; /* the importer's anchors, not in n_maps (below) */
  int n_memfd;
  char (*memfd)[128];
  char *maps_text; /* PROC_SNAP_DEBUG only */ /* "size perms offset path" of each memfd mapping, sorted */
} proc_snap;

static int ps_cmp_str_(const void *a, const void *b) { return strcmp(a, b); }

static inline void proc_snap_take(proc_snap *s, int pid) {
  memset(s, 0, sizeof *s);
  s->fd_target = calloc(PS_MAX_FDS, sizeof *s->fd_target);
  s->memfd = calloc(PS_MAX_MEMFD, sizeof *s->memfd);
  CHECK(s->fd_target && s->memfd);
  char dir[64];
  if (pid) snprintf(dir, sizeof dir, "/proc/%d/fd", pid); else snprintf(dir, sizeof dir, "/proc/self/fd");
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (!pid && fd == self) continue;
    CHECK(s->n_fds < PS_MAX_FDS);
    char path[128];
    snprintf(path, sizeof path, "%s/%d", dir, fd);
    ssize_t n = readlink(path, s->fd_target[s->n_fds], sizeof s->fd_target[0] - 1);
    if (n < 0) continue; /* closed meanwhile */
    s->fd_target[s->n_fds][n] = '\0';
    s->fd[s->n_fds++] = fd;
  }
  closedir(d);
  /* sort by fd number (insertion sort: small) */
  for (int i = 1; i < s->n_fds; i++) {
    for (int j = i; j > 0 && s->fd[j - 1] > s->fd[j]; j--) {
      int t = s->fd[j];
      s->fd[j] = s->fd[j - 1];
      s->fd[j - 1] = t;
      char tmp[64];
      memcpy(tmp, s->fd_target[j], sizeof tmp);
      memcpy(s->fd_target[j], s->fd_target[j - 1], sizeof tmp);
      memcpy(s->fd_target[j - 1], tmp, sizeof tmp);
    }
  }
  char mp[64];
  if (pid) snprintf(mp, sizeof mp, "/proc/%d/maps", pid); else snprintf(mp, sizeof mp, "/proc/self/maps");
  FILE *f = fopen(mp, "r");
  CHECK(f != NULL);
  char line[512], prev_perms[8] = "", prev_path[256] = "";
  size_t tlen = 0, tcap = 0;
  int keep = getenv("PROC_SNAP_DEBUG") != NULL;
  unsigned long prev_hi = 0, arena_end = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    char perms[8], devs[16], path[256] = "";
    unsigned long ino;
    int k = sscanf(line, "%lx-%lx %7s %lx %15s %lu %255[^\n]", &lo, &hi, perms, &off, devs, &ino, path);
    if (keep) {
      size_t l = strlen(line);
      if (tlen + l + 1 > tcap) {
        tcap = (tlen + l + 1) * 2;
        s->maps_text = realloc(s->maps_text, tcap);
      }
      memcpy(s->maps_text + tlen, line, l + 1);
      tlen += l;
    }
    if (k < 6) continue;
    char *p = path;
    while (*p == ' ') p++;
    /* Adjacent areas alike in all but their kernel bookkeeping count once:
     * the heap, grown after a fork, is two areas the kernel cannot merge. */
    int cont = lo == prev_hi && !strcmp(perms, prev_perms) && !strcmp(p, prev_path);
    /* glibc's per-thread malloc arenas (64 MiB-aligned anonymous
     * reservations) are made on a thread's first malloc and never given
     * back: allocator state, not something a test can leak. */
    if (!*p && lo % (64ul << 20) == 0) arena_end = lo + (64ul << 20);
    if (!*p && lo < arena_end) cont = 1;
    /* The importer's anchors (emu/ipc/mapper.h): one inaccessible page on a
     * 2 MiB boundary each, made as imports need them and kept until
     * aclFinalize, like the arenas above (at most 16; a thread stack's guard
     * page may look the same). */
    if (!*p && hi - lo == 4096 && lo % (2ul << 20) == 0 && !strcmp(perms, "---p")) {
      s->n_anchors++;
      prev_hi = 0;
      continue;
    }
    prev_hi = hi;
    snprintf(prev_perms, sizeof prev_perms, "%s", perms);
    snprintf(prev_path, sizeof prev_path, "%s", p);
    if (!cont) s->n_maps++;
    if (strncmp(p, "/memfd:", 7) != 0) continue;
    CHECK(s->n_memfd < PS_MAX_MEMFD);
    snprintf(s->memfd[s->n_memfd++], sizeof s->memfd[0], "%lx %.7s %lx %.80s", hi - lo, perms, off, p);
  }
  fclose(f);
  qsort(s->memfd, (size_t)s->n_memfd, sizeof s->memfd[0], ps_cmp_str_);
}

static inline void proc_snap_free(proc_snap *s) {
  free(s->fd_target);
  free(s->memfd);
  free(s->maps_text);
  s->maps_text = NULL;
  s->fd_target = NULL;
  s->memfd = NULL;
}

/* Prints how b differs from a (to stderr). Returns the number of differences. */
static inline int proc_snap_diff(const proc_snap *a, const proc_snap *b, const char *who) {
  int diffs = 0;
  for (int i = 0, j = 0; i < a->n_fds || j < b->n_fds;) {
    if (j >= b->n_fds || (i < a->n_fds && a->fd[i] < b->fd[j])) {
      fprintf(stderr, "  %s: fd %d (%s) was open, is closed\n", who, a->fd[i], a->fd_target[i]);
      diffs++;
      i++;
    } else if (i >= a->n_fds || b->fd[j] < a->fd[i]) {
      fprintf(stderr, "  %s: fd %d (%s) is new\n", who, b->fd[j], b->fd_target[j]);
      diffs++;
      j++;
    } else {
      if (strcmp(a->fd_target[i], b->fd_target[j]) != 0) {
        fprintf(stderr, "  %s: fd %d was %s, is %s\n", who, a->fd[i], a->fd_target[i], b->fd_target[j]);
        diffs++;
      }
      i++;
      j++;
    }
  }
  for (int i = 0, j = 0; i < a->n_memfd || j < b->n_memfd;) {
    int c = i >= a->n_memfd ? 1 : j >= b->n_memfd ? -1 : strcmp(a->memfd[i], b->memfd[j]);
    if (c < 0) {
      fprintf(stderr, "  %s: memfd mapping gone: %s\n", who, a->memfd[i++]);
      diffs++;
    } else if (c > 0) {
      fprintf(stderr, "  %s: memfd mapping new: %s\n", who, b->memfd[j++]);
      diffs++;
    } else {
      i++;
      j++;
    }
  }
  if (ps_count_maps_() && a->n_maps != b->n_maps) {
    fprintf(stderr, "  %s: %d mappings, %d at the start\n", who, b->n_maps, a->n_maps);
    diffs++;
  }
  return diffs;
}

/* How long a wait_s > 0 of the two below waits: at least wait_s, and as long
 * as the test's time limit allows, less a tenth of it to report what
 * differs. A clean-up that comes late on a slow or loaded machine passes;
 * only one that never comes fails. */
static inline double ps_settle_s_(double wait_s) {
  if (wait_s <= 0) return 0;
  const char *t = getenv("TEST_TIMEOUT");
  int limit = t && atoi(t) > 0 ? atoi(t) : 60;
  double left = th_seconds_left() - limit / 10.0 - 1;
  return left > wait_s ? left : wait_s;
}

/* Fails unless the process's descriptors and mappings equal *start, waiting
 * for asynchronous clean-up (a server thread seeing an EOF) when wait_s > 0
 * (see ps_settle_s_). */
static inline void proc_snap_expect(const proc_snap *start, int pid, double wait_s, const char *who) {
  wait_s = ps_settle_s_(wait_s);
  double t0 = now_s();
  for (;;) {
    proc_snap now;
    proc_snap_take(&now, pid);
    int same = now.n_fds == start->n_fds && now.n_memfd == start->n_memfd &&
               (!ps_count_maps_() || now.n_maps == start->n_maps);
    for (int i = 0; same && i < now.n_fds; i++)
      same = now.fd[i] == start->fd[i] && !strcmp(now.fd_target[i], start->fd_target[i]);
    for (int i = 0; same && i < now.n_memfd; i++) same = !strcmp(now.memfd[i], start->memfd[i]);
    if (same) {
      proc_snap_free(&now);
      return;
    }
    if (now_s() - t0 > wait_s) {
      int d = proc_snap_diff(start, &now, who);
      if (start->maps_text && now.maps_text)
        fprintf(stderr, "  %s: mappings at the start:\n%s  now:\n%s", who, start->maps_text, now.maps_text);
      proc_snap_free(&now);
      th_fail(__FILE__, __LINE__, "%s: %d difference(s) in descriptors / mappings from the start", who, d);
    }
    proc_snap_free(&now);
    usleep(5000);
  }
}

/* Fails unless every descriptor and memfd mapping of *start is still there,
 * unchanged (a connection replaced by another shows as a changed socket),
 * with at most extra_fds descriptors and extra_memfd memfd mappings more. */
static inline void proc_snap_expect_kept(const proc_snap *start, int pid, double wait_s, int extra_fds,
                                         int extra_memfd, const char *who) {
  wait_s = ps_settle_s_(wait_s);
  double t0 = now_s();
  for (;;) {
    proc_snap now;
    proc_snap_take(&now, pid);
    int missing = 0, j = 0;
    for (int i = 0; i < start->n_fds; i++) {
      while (j < now.n_fds && now.fd[j] < start->fd[i]) j++;
      if (j >= now.n_fds || now.fd[j] != start->fd[i] || strcmp(now.fd_target[j], start->fd_target[i])) missing++;
    }
    j = 0;
    for (int i = 0; i < start->n_memfd; i++) {
      while (j < now.n_memfd && strcmp(now.memfd[j], start->memfd[i]) < 0) j++;
      if (j >= now.n_memfd || strcmp(now.memfd[j], start->memfd[i])) missing++; else j++;
    }
    int ok = !missing && now.n_fds <= start->n_fds + extra_fds && now.n_memfd <= start->n_memfd + extra_memfd;
    if (ok) {
      proc_snap_free(&now);
      return;
    }
    if (now_s() - t0 > wait_s) {
      int d = proc_snap_diff(start, &now, who);
      proc_snap_free(&now);
      th_fail(__FILE__, __LINE__, "%s: %d of its descriptors / mappings gone or changed, %d difference(s) in all", who,
              missing, d);
    }
    proc_snap_free(&now);
    usleep(5000);
  }
}

/* For a forked helper process: ends it (SIGALRM) if it outlives the test's
 * time limit, so that a hang leaves no orphan behind. */
static inline void child_deadline(void) {
  const char *t = getenv("TEST_TIMEOUT");
  int s = t ? atoi(t) : 0;
  alarm((unsigned)(s > 0 ? s : 60) + 5);
}

/* The highest descriptor number open in this process now. */
static inline int highest_open_fd(void) {
  int maxfd = 0;
  proc_snap s;
  proc_snap_take(&s, 0);
  for (int i = 0; i < s.n_fds; i++)
    if (s.fd[i] > maxfd) maxfd = s.fd[i];
  proc_snap_free(&s);
  return maxfd;
}

/* Descriptors that are memfds whose name starts with prefix. */
static inline int proc_snap_count_fds(const proc_snap *s, const char *prefix) {
  int n = 0;
  for (int i = 0; i < s->n_fds; i++)
    if (!strncmp(s->fd_target[i], prefix, strlen(prefix))) n++;
  return n;
}

#endif
