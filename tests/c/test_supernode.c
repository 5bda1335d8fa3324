/*
 * The emulated super-node: servers are network namespaces of one machine
 * (children that unshare(CLONE_NEWNET)), meeting in a rendezvous directory
 * (ASCEND_IPC_SUPERNODE_DIR, a fresh one per test). Every rule across
 * servers, and the refusals: another super-node, another user, a bad
 * directory, a forged fabric handle. A test "skipped" where network
 * namespaces cannot be made (not root, no user namespaces).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc_util.h"

#define GRAN (2 * MiB)
#define INIT_NET_INO 4026531833u
#define NOBODY 65534
#define SKIP 77 /* a child's exit status: unshare refused */

/* Whether this process may make network namespaces (tried in a child). */
static int can_unshare(void) {
  int pid = fork();
  if (pid == 0) _exit(unshare(CLONE_NEWNET) == 0 ? 0 : 1);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define NEEDS_NETNS()                                                                        \
  do {                                                                                       \
    if (!can_unshare()) {                                                                    \
      fprintf(stderr, "skipped: unshare(CLONE_NEWNET) refused (not root, no user namespaces)\n"); \
      return;                                                                                \
    }                                                                                        \
  } while (0)

/* A rendezvous directory of this test's own, named by the setting; before
 * the first runtime call (the settings are read once). */
static char g_dir[64];
static int g_dir_owner;

/* Removes the directory and what is in it, in the process that made it. */
static void remove_dir(void) {
  if (getpid() != g_dir_owner) return;
  DIR *d = opendir(g_dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(dirfd(d), de->d_name, 0);
  closedir(d);
  rmdir(g_dir);
}

static void fresh_dir(void) {
  strcpy(g_dir, "/tmp/aipc-sn-test.XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  g_dir_owner = getpid();
  atexit(remove_dir);
  setenv("ASCEND_IPC_SUPERNODE_DIR", g_dir, 1);
}

/* The server this process is on, as the emulator derives it. */
static uint32_t own_sdid(void) {
  struct stat st;
  CHECK(stat("/proc/self/ns/net", &st) == 0);
  return st.st_ino == INIT_NET_INO ? 0 : (uint32_t)st.st_ino;
}

/* A child on a server of its own: reports its pid and sdid first. */
static int enter_server(chan *c) {
  if (unshare(CLONE_NEWNET) != 0) {
    send_int(c->up[1], -1);
    return SKIP;
  }
  send_int(c->up[1], getpid());
  send_int(c->up[1], (int)own_sdid());
  return 0;
}

/* Spawns fn as a server of its own; *pid, *sdid its identity. */
static int spawn_server(chan *c, chan_fn fn, void *arg, int32_t *sdid) {
  chan_open(c);
  int pid = chan_spawn(c, fn, arg);
  CHECK_EQ(recv_int(c->up[0]), pid);
  *sdid = recv_int(c->up[0]);
  CHECK((uint32_t)*sdid != own_sdid());
  return pid;
}

/* ---- keys ------------------------------------------------------------------------- */

/* Imports the key it is sent, writes 0x5a at byte 1, reports the code. */
static int key_importer(chan *c, void *arg) {
  (void)arg;
  if (enter_server(c)) return SKIP;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  aclError rc = aclrtIpcMemImportByKey(&p, key, 0);
  if (rc == ACL_SUCCESS) {
    ((volatile char *)p)[1] = 0x5a;
    CHECK_OK(aclrtIpcMemClose(key));
  } else {
    const char *m = aclGetRecentErrMsg();
    fprintf(stderr, "  (child: %d %s)\n", rc, m ? m : "");
  }
  send_int(c->up[1], rc);
  CHECK_OK(aclFinalize());
  return 0;
}

/* mode: how the parent whitelists the child. */
enum { WL_EXACT, WL_OTHER_PID, WL_OTHER_SDID, WL_NONE_DISABLED, WL_LOCAL_ONLY };

static int key_case(int mode) {
  chan c;
  int32_t sdid;
  int pid = spawn_server(&c, key_importer, NULL, &sdid);
  char key[KEYLEN] = {0};
  char *p = export_new(PAGE, mode == WL_NONE_DISABLED ? EXPORT_ANY : EXPORT_DEFAULT, key);
  int32_t who = pid, other = getppid();
  aclrtServerPid sp = {(uint32_t)sdid, &who, 1};
  if (mode == WL_OTHER_PID) sp.pid = &other;
  if (mode == WL_OTHER_SDID) sp.sdid = (uint32_t)sdid + 1;
  if (mode == WL_LOCAL_ONLY) CHECK_OK(aclrtIpcMemSetImportPid(key, &who, 1)); /* this server's list: not theirs */
  if (mode != WL_NONE_DISABLED && mode != WL_LOCAL_ONLY) CHECK_OK(aclrtIpcMemImportPidInterServer(key, &sp, 1));
  to_child(&c, key, KEYLEN);
  int rc = recv_int(c.up[0]);
  CHECK_EQ(th_wait(pid), 0);
  if (rc == ACL_SUCCESS) CHECK_EQ(p[1], 0x5a);
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
  return rc;
}

TEST(key_imports_on_a_whitelisted_pid_of_another_server) {
  NEEDS_NETNS();
  fresh_dir();
  CHECK_EQ(key_case(WL_EXACT), ACL_SUCCESS);
}

TEST(key_refused_to_a_pid_not_whitelisted) {
  NEEDS_NETNS();
  fresh_dir();
  CHECK_EQ(key_case(WL_OTHER_PID), ACL_ERROR_RT_NO_PERMISSION);
}

TEST(key_refused_when_whitelisted_for_another_sdid) {
  NEEDS_NETNS();
  fresh_dir();
  CHECK_EQ(key_case(WL_OTHER_SDID), ACL_ERROR_RT_NO_PERMISSION);
}

TEST(key_refused_when_whitelisted_for_this_server_only) {
  NEEDS_NETNS();
  fresh_dir();
  /* never offered across servers: the exporter has no socket in the directory */
  CHECK_EQ(key_case(WL_LOCAL_ONLY), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
}

TEST(key_without_pid_validation_needs_the_socket) {
  NEEDS_NETNS();
  fresh_dir();
  /* DISABLE_PID_VALIDATION: its own server only; here the exporter offered
   * nothing across servers, so it has no socket to reach. */
  CHECK_EQ(key_case(WL_NONE_DISABLED), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
}

static int disabled_importer(chan *c, void *arg) { return key_importer(c, arg); }

/* Even when the exporter has its socket in the directory (another key is
 * whitelisted across servers): pid validation disabled does not cross
 * servers, only the inter-server whitelist does. */
TEST(key_without_pid_validation_stays_within_its_server) {
  NEEDS_NETNS();
  fresh_dir();
  chan c;
  int32_t sdid;
  int pid = spawn_server(&c, disabled_importer, NULL, &sdid);
  char key[KEYLEN] = {0}, other[KEYLEN] = {0};
  char *p = export_new(PAGE, EXPORT_ANY, key);
  /* another key whitelisted across servers opens the exporter's socket */
  char *q = export_new(PAGE, EXPORT_DEFAULT, other);
  int32_t nobody = 1;
  aclrtServerPid sp = {(uint32_t)sdid, &nobody, 1};
  CHECK_OK(aclrtIpcMemImportPidInterServer(other, &sp, 1));
  to_child(&c, key, KEYLEN);
  CHECK_EQ(recv_int(c.up[0]), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  CHECK_EQ(th_wait(pid), 0);
  CHECK(p[1] != 0x5a); /* nothing reached the memory */
  chan_close(&c);
  CHECK_OK(aclrtIpcMemClose(other));
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(q));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* A pid whitelisted for another server, then given to another process of
 * that server: refused (start-time binding). The parent holds the server's
 * namespace open, and asks the kernel for the pid again (ns_last_pid). */
static int stay_child(chan *c, void *arg) {
  (void)arg;
  if (enter_server(c)) return SKIP;
  int x;
  th_read(c->down[0], &x, sizeof x); /* until the parent has the namespace */
  return 0;
}

/* Start time of process pid in clock ticks since boot (/proc/<pid>/stat field 22). */
static uint64_t start_ticks(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  CHECK(p != NULL);
  unsigned long long v = 0;
  int field = 2;
  for (p++; *p && field < 22; p++)
    if (*p == ' ') field++;
  CHECK(sscanf(p, "%llu", &v) == 1);
  return v;
}

static uint64_t now_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  long hz = sysconf(_SC_CLK_TCK);
  return (uint64_t)ts.tv_sec * (uint64_t)hz + (uint64_t)ts.tv_nsec / (1000000000ull / (uint64_t)hz);
}

typedef struct reuse_arg {
  int nsfd;
  int pipe_up[2], pipe_down[2];
} reuse_arg;

static int reuse_importer(void *arg) {
  reuse_arg *a = arg;
  if (setns(a->nsfd, CLONE_NEWNET) != 0) return 3;
  send_int(a->pipe_up[1], getpid());
  if (recv_int(a->pipe_down[0]) == 0) return 0; /* not the pid wanted */
  char key[KEYLEN] = {0};
  th_read(a->pipe_down[0], key, KEYLEN);
  void *p = NULL;
  aclError rc = aclrtIpcMemImportByKey(&p, key, 0);
  const char *m = aclGetRecentErrMsg();
  if (rc != ACL_SUCCESS) fprintf(stderr, "  (reused pid: %s)\n", m ? m : "");
  send_int(a->pipe_up[1], rc);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(key_refused_to_a_reused_pid_of_another_server) {
  NEEDS_NETNS();
  fresh_dir();
  chan c;
  int32_t sdid;
  int pid = spawn_server(&c, stay_child, NULL, &sdid);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
  reuse_arg a;
  a.nsfd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(a.nsfd >= 0);
  char key[KEYLEN] = {0};
  char *p = export_new(PAGE, EXPORT_DEFAULT, key);
  int32_t who = pid;
  aclrtServerPid sp = {(uint32_t)sdid, &who, 1};
  CHECK_OK(aclrtIpcMemImportPidInterServer(key, &sp, 1)); /* bound to the child that has it now */
  uint64_t start1 = start_ticks(pid);
  int x = 1;
  th_write(c.down[1], &x, sizeof x);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  /* A start time has clock ticks for unit: the next process with that pid
   * must start in a later tick to be told apart (as on any Linux). */
  while (now_ticks() <= start1 + 1) usleep(1000);
  /* Another process of that server with the same pid, if the kernel gives it. */
  int got = 0;
  for (int tries = 0; tries < 50 && !got; tries++) {
    FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (!f) break;
    fprintf(f, "%d", pid - 1);
    if (fclose(f) != 0) break;
    CHECK(pipe(a.pipe_up) == 0 && pipe(a.pipe_down) == 0);
    int q = th_spawn(reuse_importer, &a);
    int qpid = recv_int(a.pipe_up[0]);
    CHECK_EQ(qpid, q);
    send_int(a.pipe_down[1], q == pid);
    if (q == pid) {
      got = 1;
      th_write(a.pipe_down[1], key, KEYLEN);
      CHECK_EQ(recv_int(a.pipe_up[0]), ACL_ERROR_RT_NO_PERMISSION);
    }
    CHECK_EQ(th_wait(q), 0);
    for (int i = 0; i < 2; i++) {
      close(a.pipe_up[i]);
      close(a.pipe_down[i]);
    }
  }
  if (!got) fprintf(stderr, "skipped: the kernel did not give pid %d again (ns_last_pid)\n", pid);
  close(a.nsfd);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}

/* ---- notifies, events ------------------------------------------------------------------ */

static int notify_importer(chan *c, void *arg) {
  (void)arg;
  if (enter_server(c)) return SKIP;
  char key[KEYLEN] = {0};
  from_parent(c, key, KEYLEN);
  aclrtNotify n = NULL;
  aclError rc = aclrtNotifyImportByKey(&n, key, 0);
  if (rc == ACL_SUCCESS) {
    aclrtStream s = stream_new();
    CHECK_OK(aclrtRecordNotify(n, s));
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK_OK(aclrtDestroyStream(s));
    CHECK_OK(aclrtDestroyNotify(n));
  }
  send_int(c->up[1], rc);
  CHECK_OK(aclFinalize());
  return 0;
}

static void notify_case(bool whitelist) {
  chan c;
  int32_t sdid;
  int pid = spawn_server(&c, notify_importer, NULL, &sdid);
  CHECK_OK(aclrtSetDevice(0));
  aclrtNotify n;
  CHECK_OK(aclrtCreateNotify(&n, 0));
  char key[KEYLEN] = {0};
  CHECK_OK(aclrtNotifyGetExportKey(n, key, KEYLEN, 0));
  int32_t who = whitelist ? pid : (int32_t)getppid();
  aclrtServerPid sp = {(uint32_t)sdid, &who, 1};
  CHECK_OK(aclrtNotifySetImportPidInterServer(n, &sp, 1));
  to_child(&c, key, KEYLEN);
  int rc = recv_int(c.up[0]);
  CHECK_EQ(th_wait(pid), 0);
  if (whitelist) {
    CHECK_EQ(rc, ACL_SUCCESS);
    aclrtStream s = stream_new();
    CHECK_OK(aclrtWaitAndResetNotify(n, s, 0)); /* the other server's record */
    CHECK_OK(aclrtSynchronizeStream(s));
    CHECK_OK(aclrtDestroyStream(s));
  } else {
    CHECK_EQ(rc, ACL_ERROR_RT_NO_PERMISSION);
  }
  chan_close(&c);
  CHECK_OK(aclrtDestroyNotify(n));
  CHECK_OK(aclFinalize());
}

TEST(notify_across_servers) {
  NEEDS_NETNS();
  fresh_dir();
  notify_case(true);
}

TEST(notify_refused_to_a_pid_not_whitelisted) {
  NEEDS_NETNS();
  fresh_dir();
  notify_case(false);
}

static int event_importer(chan *c, void *arg) {
  (void)arg;
  if (enter_server(c)) return SKIP;
  aclrtIpcEventHandle h;
  from_parent(c, &h, sizeof h);
  aclrtEvent ev = NULL;
  CHECK_MSG(aclrtIpcOpenEventHandle(h, &ev), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "within one server only");
  send_int(c->up[1], 0);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(ipc_event_refused_across_servers) {
  NEEDS_NETNS();
  fresh_dir();
  chan c;
  int32_t sdid;
  int pid = spawn_server(&c, event_importer, NULL, &sdid);
  aclrtEvent ev;
  CHECK_OK(aclrtCreateEventExWithFlag(&ev, ACL_EVENT_IPC));
  aclrtIpcEventHandle h;
  CHECK_OK(aclrtIpcGetEventHandle(ev, &h));
  to_child(&c, &h, sizeof h);
  CHECK_EQ(recv_int(c.up[0]), 0);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtDestroyEvent(ev));
  CHECK_OK(aclFinalize());
}

/* ---- fabric handles ------------------------------------------------------------------------ */

/* Maps handle h (GRAN bytes) at a fresh reservation. */
static char *map_phys(aclrtDrvMemHandle h) {
  void *v = NULL;
  CHECK_OK(aclrtReserveMemAddress(&v, GRAN, 0, NULL, 0));
  CHECK_OK(aclrtMapMem(v, GRAN, 0, h, 0));
  return v;
}

static void unmap_phys(void *v) {
  CHECK_OK(aclrtUnmapMem(v));
  CHECK_OK(aclrtReleaseMemAddress(v));
}

/* Imports the fabric handle it is sent (twice: once while held, reports),
 * writes 0x77 at byte 3 and checks byte 0 is 0x11. */
static int fabric_importer_in(chan *c, bool own_server) {
  if (!own_server && enter_server(c)) return SKIP;
  if (own_server) {
    send_int(c->up[1], getpid());
    send_int(c->up[1], (int)own_sdid());
  }
  aclrtMemFabricHandle fh;
  from_parent(c, &fh, sizeof fh);
  CHECK_OK(aclrtSetDevice(0));
  aclrtDrvMemHandle h = NULL;
  aclError rc = aclrtMemImportFromShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h);
  if (rc == ACL_SUCCESS) {
    char *v = map_phys(h);
    CHECK_EQ(v[0], 0x11);
    v[3] = 0x77;
    unmap_phys(v);
    CHECK_OK(aclrtFreePhysical(h));
  } else {
    const char *m = aclGetRecentErrMsg();
    fprintf(stderr, "  (child: %d %s)\n", rc, m ? m : "");
  }
  send_int(c->up[1], rc);
  /* After the exporter freed it: nothing more to import. */
  from_parent(c, &fh, sizeof fh);
  h = NULL;
  aclError again = aclrtMemImportFromShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h);
  send_int(c->up[1], again);
  CHECK_OK(aclFinalize());
  return 0;
}

static int fabric_importer(chan *c, void *arg) { return fabric_importer_in(c, arg != NULL); }

enum { FAB_DISABLED, FAB_SET_PID, FAB_NOT_SET, FAB_SAME_SERVER };

static void fabric_case(int mode) {
  chan c;
  int32_t sdid;
  int pid;
  if (mode == FAB_SAME_SERVER) {
    chan_open(&c);
    pid = chan_spawn(&c, fabric_importer, (void *)1);
    CHECK_EQ(recv_int(c.up[0]), pid);
    sdid = recv_int(c.up[0]);
  } else {
    pid = spawn_server(&c, fabric_importer, NULL, &sdid);
  }
  CHECK_OK(aclrtSetDevice(0));
  aclrtDrvMemHandle ph = phys_new(GRAN);
  char *v = map_phys(ph);
  v[0] = 0x11;
  aclrtMemFabricHandle fh;
  memset(&fh, 0, sizeof fh);
  uint64_t flags = mode == FAB_DISABLED ? ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION : 0;
  CHECK_OK(aclrtMemExportToShareableHandleV2(ph, flags, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &fh));
  int32_t who = mode == FAB_NOT_SET ? (int32_t)getppid() : pid;
  if (mode != FAB_DISABLED) CHECK_OK(aclrtMemSetPidToShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &who, 1));
  to_child(&c, &fh, sizeof fh);
  int rc = recv_int(c.up[0]);
  if (mode == FAB_NOT_SET) {
    CHECK_EQ(rc, ACL_ERROR_RT_NO_PERMISSION);
  } else {
    CHECK_EQ(rc, ACL_SUCCESS);
    CHECK_EQ(v[3], 0x77); /* the same memory, zero-copy */
  }
  /* The exporter frees: no new import, from any server. */
  unmap_phys(v);
  CHECK_OK(aclrtFreePhysical(ph));
  to_child(&c, &fh, sizeof fh);
  CHECK(recv_int(c.up[0]) != ACL_SUCCESS);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclFinalize());
}

TEST(fabric_handle_without_pid_validation_across_servers) {
  NEEDS_NETNS();
  fresh_dir();
  fabric_case(FAB_DISABLED);
}

TEST(fabric_handle_with_set_pid_across_servers) {
  NEEDS_NETNS();
  fresh_dir();
  fabric_case(FAB_SET_PID);
}

TEST(fabric_handle_refused_to_a_pid_not_set) {
  NEEDS_NETNS();
  fresh_dir();
  fabric_case(FAB_NOT_SET);
}

TEST(fabric_handle_within_one_server) {
  fresh_dir();
  fabric_case(FAB_SAME_SERVER);
}

/* Exports a fabric handle in the parent; returns it and the handle. */
static aclrtDrvMemHandle fabric_export(aclrtMemFabricHandle *fh) {
  CHECK_OK(aclrtSetDevice(0));
  aclrtDrvMemHandle ph = phys_new(GRAN);
  memset(fh, 0, sizeof *fh);
  CHECK_OK(aclrtMemExportToShareableHandleV2(ph, ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
                                             ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, fh));
  return ph;
}

/* Exports a fabric handle (in a fresh directory) to a child running child:
 * the child must succeed; the parent then frees and finalizes. */
static void fabric_to_child(chan_fn child) {
  fresh_dir();
  aclrtMemFabricHandle fh;
  aclrtDrvMemHandle ph = fabric_export(&fh);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, child, NULL);
  to_child(&c, &fh, sizeof fh);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

/* A child of another super-node (its own directory, set before its first call). */
static int other_supernode_child(chan *c, void *arg) {
  (void)arg;
  char dir[64] = "/tmp/aipc-sn-other.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  setenv("ASCEND_IPC_SUPERNODE_DIR", dir, 1);
  aclrtMemFabricHandle fh;
  from_parent(c, &fh, sizeof fh);
  aclrtDrvMemHandle h = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "this process is in super-node");
  CHECK_OK(aclFinalize());
  char id[96];
  snprintf(id, sizeof id, "%s/id", dir);
  unlink(id);
  rmdir(dir);
  return 0;
}

TEST(another_supernode_refused) {
  fresh_dir();
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, other_supernode_child, NULL); /* before this process reads its settings */
  aclrtMemFabricHandle fh;
  aclrtDrvMemHandle ph = fabric_export(&fh);
  to_child(&c, &fh, sizeof fh);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
}

static int other_user_child(chan *c, void *arg) {
  (void)arg;
  aclrtMemFabricHandle fh;
  from_parent(c, &fh, sizeof fh);
  CHECK(setgroups(0, NULL) == 0);
  CHECK(setgid(NOBODY) == 0);
  CHECK(setuid(NOBODY) == 0);
  aclrtDrvMemHandle h = NULL;
  CHECK_MSG(aclrtMemImportFromShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h),
            ACL_ERROR_RT_NO_PERMISSION, "another user");
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(another_users_process_refused) {
  if (geteuid() != 0) {
    fprintf(stderr, "skipped: needs root to become another user\n");
    return;
  }
  fabric_to_child(other_user_child);
}

/* Every byte of a handle changed: refused with a code, never a crash or a hang. */
static int garbled_child(chan *c, void *arg) {
  (void)arg;
  aclrtMemFabricHandle fh;
  from_parent(c, &fh, sizeof fh);
  CHECK_OK(aclrtSetDevice(0));
  for (size_t i = 0; i < sizeof fh.data; i++) {
    aclrtMemFabricHandle g = fh;
    g.data[i] ^= (uint8_t)(1u << (i % 8));
    aclrtDrvMemHandle h = NULL;
    aclError rc = aclrtMemImportFromShareableHandleV2(&g, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h);
    if (rc == ACL_SUCCESS) fprintf(stderr, "  byte %zu changed, yet imported\n", i);
    CHECK(rc != ACL_SUCCESS);
    CHECK(h == NULL);
  }
  aclrtDrvMemHandle h = NULL;
  CHECK_OK(aclrtMemImportFromShareableHandleV2(&fh, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &h)); /* the real one still */
  CHECK_OK(aclrtFreePhysical(h));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(garbled_fabric_handles_refused) {
  timeout_never(); /* refusals, not timeouts */
  fabric_to_child(garbled_child);
}

/* A rendezvous directory that must be refused, set up by the parent. */
static int bad_dir_child(chan *c, void *arg) {
  const char *needle = arg;
  char dir[128] = {0};
  from_parent(c, dir, sizeof dir);
  setenv("ASCEND_IPC_SUPERNODE_DIR", dir, 1);
  CHECK_OK(aclrtSetDevice(0));
  aclrtDrvMemHandle ph = phys_new(GRAN);
  aclrtMemFabricHandle fh;
  CHECK_MSG(aclrtMemExportToShareableHandleV2(ph, 0, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &fh),
            ACL_ERROR_RT_NO_PERMISSION, needle);
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
  return 0;
}

static void bad_dir_case(const char *dir, const char *needle) {
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, bad_dir_child, (void *)needle);
  char buf[128] = {0};
  snprintf(buf, sizeof buf, "%s", dir);
  to_child(&c, buf, sizeof buf);
  CHECK_EQ(th_wait(pid), 0);
  chan_close(&c);
}

TEST(bad_rendezvous_directories_refused) {
  fresh_dir();
  char loose[96], link[96], theirs[96];
  snprintf(loose, sizeof loose, "%s/loose", g_dir);
  CHECK(mkdir(loose, 0700) == 0 && chmod(loose, 0777) == 0);
  bad_dir_case(loose, "writable by its group or others");
  snprintf(link, sizeof link, "%s/link", g_dir);
  CHECK(symlink(g_dir, link) == 0);
  bad_dir_case(link, "symbolic link");
  if (geteuid() == 0) {
    snprintf(theirs, sizeof theirs, "%s/theirs", g_dir);
    CHECK(mkdir(theirs, 0700) == 0 && chown(theirs, NOBODY, NOBODY) == 0);
    bad_dir_case(theirs, "another user");
    rmdir(theirs);
  }
  unlink(link);
  rmdir(loose); /* the rest goes with remove_dir */
}

/* ---- explicit sdids ------------------------------------------------------------------------ */

/* A server with ASCEND_IPC_SDID=sdid (set before its first call): exports a
 * fabric handle (which joins the super-node) and reports the code; stays
 * until told. */
static int explicit_server(chan *c, void *arg) {
  setenv("ASCEND_IPC_SDID", (const char *)arg, 1);
  if (enter_server(c)) return SKIP;
  CHECK_OK(aclrtSetDevice(0));
  aclrtDrvMemHandle ph = phys_new(GRAN);
  aclrtMemFabricHandle fh;
  aclError rc = aclrtMemExportToShareableHandleV2(ph, 0, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &fh);
  const char *m = aclGetRecentErrMsg();
  if (rc != ACL_SUCCESS) fprintf(stderr, "  (sdid %s: %s)\n", (const char *)arg, m ? m : "");
  send_int(c->up[1], rc);
  if (rc != ACL_SUCCESS) CHECK(m && strstr(m, "already the server of another network namespace"));
  recv_int(c->down[0]);
  CHECK_OK(aclrtFreePhysical(ph));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(two_servers_with_one_sdid_refused) {
  NEEDS_NETNS();
  fresh_dir();
  chan a, b;
  chan_open(&a);
  int pa = chan_spawn(&a, explicit_server, "9");
  CHECK_EQ(recv_int(a.up[0]), pa);
  recv_int(a.up[0]); /* its derived sdid: not the one it uses */
  CHECK_EQ(recv_int(a.up[0]), ACL_SUCCESS);
  chan_open(&b);
  int pb = chan_spawn(&b, explicit_server, "9"); /* another namespace, the same sdid */
  CHECK_EQ(recv_int(b.up[0]), pb);
  recv_int(b.up[0]);
  CHECK_EQ(recv_int(b.up[0]), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  send_int(a.down[1], 1);
  send_int(b.down[1], 1);
  CHECK_EQ(th_wait(pa), 0);
  CHECK_EQ(th_wait(pb), 0);
  chan_close(&a);
  chan_close(&b);
}
