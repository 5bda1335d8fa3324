/*
 * White-box tests of where imports are mapped (emu/ipc/mapper.h): above an
 * anchor page that keeps their page tables, one import per anchor, the
 * kernel's choice when none is free or the room above one was taken, and
 * nothing reachable once unmapped. Links libaipc_internal.a.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#include "emu/ipc/mapper.h"

/* valgrind places every mapping itself (MAP_FIXED_NOREPLACE is a hint to
 * it): the mapper then falls back to the kernel's choice, which these
 * tests check works, but no import sits above an anchor. */
static int under_valgrind(void) { return getenv("ASCEND_IPC_VALGRIND") != NULL; }

#define PAGE ((size_t)4096)
#define GiB ((size_t)1 << 30)
#define TWO_MIB ((size_t)2 << 20)

/* A memfd of size bytes whose first page reads seed. */
static int memfd_of(size_t size, unsigned char seed) {
  int fd = memfd_create("mapper-test", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(ftruncate(fd, (off_t)size) == 0);
  CHECK(pwrite(fd, &seed, 1, 0) == 1);
  return fd;
}

/* The permissions /proc/self/maps shows for the page at p ("" if unmapped). */
static void perms_at(const void *p, char out[8]) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  char line[512];
  out[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi) {
      snprintf(out, 8, "%s", perms);
      break;
    }
  }
  fclose(f);
}

TEST(an_import_sits_above_an_anchor_that_stays) {
  int fd = memfd_of(GiB, 7);
  unsigned char *p = aipc__mapper_map(fd, 0, GiB, true);
  CHECK(p != NULL);
  CHECK_EQ(p[0], 7);
  if (under_valgrind()) {
    aipc__mapper_unmap(p, GiB);
    aipc__mapper_finalize();
    close(fd);
    return;
  }
  char perms[8];
  /* 2 MiB and more: on the 2 MiB boundary above the anchor's, where huge pages map whole */
  unsigned char *anchor = p - TWO_MIB;
  CHECK((uintptr_t)p % TWO_MIB == 0);
  perms_at(anchor, perms);
  CHECK(strcmp(perms, "---p") == 0); /* the anchor: no access */
  perms_at(anchor + PAGE, perms);
  CHECK(perms[0] == '\0'); /* and nothing between it and the import */
  aipc__mapper_unmap(p, GiB);
  perms_at(p, perms);
  CHECK(perms[0] == '\0');           /* the import is gone */
  perms_at(anchor, perms);
  CHECK(strcmp(perms, "---p") == 0); /* its anchor is not */
  /* the next import, of any size, takes the same anchor: less than 2 MiB
   * beside its page, in the page tables it keeps */
  int small = memfd_of(PAGE, 9);
  unsigned char *q = aipc__mapper_map(small, 0, PAGE, true);
  CHECK(q == anchor + PAGE);
  CHECK_EQ(q[0], 9);
  aipc__mapper_unmap(q, PAGE);
  /* a range starting inside a 2 MiB page sits at its place in 2 MiB */
  q = aipc__mapper_map(fd, 3 * PAGE, 4 * TWO_MIB, true);
  CHECK(q == anchor + TWO_MIB + 3 * PAGE);
  aipc__mapper_unmap(q, 4 * TWO_MIB);
  q = aipc__mapper_map(fd, TWO_MIB + PAGE, 4 * TWO_MIB, false); /* and where the kernel chooses */
  CHECK(q != NULL && (uintptr_t)q % TWO_MIB == PAGE);
  aipc__mapper_unmap(q, 4 * TWO_MIB);
  aipc__mapper_finalize();
  perms_at(anchor, perms);
  CHECK(perms[0] == '\0'); /* finalize gives the anchors back */
  close(fd);
  close(small);
}

TEST(one_import_per_anchor_then_the_kernel_chooses) {
  enum { N = 20 };
  int fd = memfd_of(64 << 20, 3);
  unsigned char *p[N];
  int anchored = 0;
  char perms[8];
  for (int i = 0; i < N; i++) {
    p[i] = aipc__mapper_map(fd, 0, 64 << 20, true);
    CHECK(p[i] != NULL);
    CHECK_EQ(p[i][0], 3);
    CHECK((uintptr_t)p[i] % TWO_MIB == 0); /* anchored or not, where huge pages map whole */
    perms_at(p[i] - TWO_MIB, perms);
    anchored += strcmp(perms, "---p") == 0;
    for (int j = 0; j < i; j++) CHECK(p[j] != p[i]);
  }
  CHECK_EQ(anchored, under_valgrind() ? 0 : 16);
  p[0][1] = 42; /* every one maps the same bytes */
  for (int i = 1; i < N; i++) CHECK_EQ(p[i][1], 42);
  for (int i = 0; i < N; i++) aipc__mapper_unmap(p[i], 64 << 20);
  /* not anchored (a synchronization page): the anchors are all free, none taken */
  unsigned char *e = aipc__mapper_map(fd, 0, PAGE, false);
  CHECK(e != NULL && (e != p[0] || under_valgrind()));
  CHECK_EQ(e[1], 42);
  aipc__mapper_unmap(e, PAGE);
  unsigned char *again = aipc__mapper_map(fd, 0, PAGE, true);
  CHECK(again == p[0] - TWO_MIB + PAGE || under_valgrind());
  aipc__mapper_unmap(again, PAGE);
  aipc__mapper_finalize();
  close(fd);
}

TEST(room_taken_above_an_anchor_falls_back) {
  int fd = memfd_of(GiB, 5);
  unsigned char *p = aipc__mapper_map(fd, 0, PAGE, true);
  CHECK(p != NULL);
  aipc__mapper_unmap(p, PAGE);
  /* someone else's mapping where the next import of 1 GiB would go */
  void *squatter = mmap(p + (512 << 20), PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(squatter == p + (512 << 20));
  unsigned char *q = aipc__mapper_map(fd, 0, GiB, true);
  CHECK(q != NULL && q != p); /* mapped all the same, elsewhere */
  CHECK_EQ(q[0], 5);
  char perms[8];
  perms_at(squatter, perms);
  CHECK(strcmp(perms, "r--p") == 0); /* and the squatter is untouched */
  aipc__mapper_unmap(q, GiB);
  munmap(squatter, PAGE);
  aipc__mapper_finalize();
  close(fd);
}

static unsigned char *g_closed;
static int touch_closed(void *arg) {
  (void)arg;
  return g_closed[0] + 1; /* 2 if it did not fault */
}

TEST(an_unmapped_import_faults) {
  int fd = memfd_of(64 << 20, 1);
  g_closed = aipc__mapper_map(fd, 0, 64 << 20, true);
  CHECK(g_closed != NULL);
  aipc__mapper_unmap(g_closed, 64 << 20);
  close(fd);
  int status = th_wait(th_spawn(touch_closed, NULL));
#if defined(__SANITIZE_ADDRESS__)
  CHECK(status != 0 && status != 1 + 1); /* ASan reports the fault (SEGV on unknown address) and exits */
#else
  if (under_valgrind()) /* valgrind reports the invalid read and exits with its error code */
    CHECK(status != 0 && status != 1 + 1);
  else
    CHECK_EQ(status, 128 + SIGSEGV);
#endif
  aipc__mapper_finalize();
}

TEST(a_failed_map_says_why_and_keeps_the_anchor) {
  int fd = memfd_of(PAGE, 1);
  unsigned char *p = aipc__mapper_map(fd, 0, PAGE, true);
  CHECK(p != NULL);
  aipc__mapper_unmap(p, PAGE);
  int ro = open("/dev/zero", O_RDONLY);
  CHECK(ro >= 0);
  errno = 0;
  CHECK(aipc__mapper_map(ro, 0, PAGE, true) == NULL); /* read-only descriptor, read-write map */
  CHECK_EQ(errno, EACCES);
  unsigned char *q = aipc__mapper_map(fd, 0, PAGE, true);
  CHECK(q == p || under_valgrind()); /* the anchor is still good */
  aipc__mapper_unmap(q, PAGE);
  close(ro);
  close(fd);
  aipc__mapper_finalize();
}
