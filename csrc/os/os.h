/*
 * The platform layer: the Linux calls the runtime and its IPC layer make in
 * several places, each written once here. Everything above this folder is
 * plain C and pthreads.
 */
#ifndef ASCEND_IPC_OS_OS_H_
#define ASCEND_IPC_OS_OS_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Linux constants the headers of an older C library lack (glibc 2.17 knows
 * no seals and no MAP_FIXED_NOREPLACE), for the files that include this one
 * after <fcntl.h> and <sys/mman.h>. Spelt as glibc spells them, so that a
 * header read later defines them again identically. A kernel without
 * MAP_FIXED_NOREPLACE (before 4.17) takes the address as a hint.
 */
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* ---- clocks ------------------------------------------------------------- */

/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t aipc__os_now_ms(void);
/* The same, from the coarse clock: no syscall, a few ms of resolution. */
uint64_t aipc__os_now_ms_coarse(void);
/* Nanoseconds of CLOCK_MONOTONIC (the same clock in every process). */
uint64_t aipc__os_now_ns(void);

/* ---- futexes ------------------------------------------------------------- */

/* Sleeps while *word == expected, at most timeout_ms (< 0: no limit). The
 * word may lie in memory shared between processes. Returns 0 when woken or
 * when *word differed, -1 with errno ETIMEDOUT or EINTR otherwise. */
int aipc__os_futex_wait(const uint32_t *word, uint32_t expected, int timeout_ms);
/* Wakes every thread, in any process, sleeping on word. */
void aipc__os_futex_wake_all(const uint32_t *word);

/* Whether process pid exists and is the one that started at start (its
 * aipc__os_process_start value): false once it ended, even if its pid was
 * given to another process since. */
bool aipc__os_process_alive(pid_t pid, uint64_t start);
/* An id of this process's pid namespace (0 if unknown): pids mean the same
 * process only between processes with the same one. */
uint64_t aipc__os_pid_namespace(void);
/* The same for the network namespace: abstract sockets are seen only from
 * their own one. */
uint64_t aipc__os_net_namespace(void);
/* An id of this boot of this host (a hash of the kernel's boot id; 0 if
 * unknown): containers on one host share it, two hosts never do. */
uint64_t aipc__os_host_boot(void);

/* ---- threads ------------------------------------------------------------ */

/*
 * Starts fn(arg) on a new thread that takes no signals (they belong to the
 * application's threads). Returns 0 or an errno value.
 */
int aipc__os_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* ---- memory files --------------------------------------------------------- */

/* A close-on-exec memfd of size 0; sealable: seals may be added later. -1 and errno on failure. */
int aipc__os_memfd(const char *name, bool sealable);
/*
 * A close-on-exec memfd of size bytes, sealed against shrinking and growing
 * (and against further seals), so a process it is sent to can neither cut
 * it under its owner (a SIGBUS there) nor grow it. -1 and errno on failure.
 */
int aipc__os_memfd_sealed(const char *name, uint64_t size);
/* The huge page size of memfds from aipc__os_memfd_sealed_huge. */
#define AIPC_OS_HUGE_PAGE ((uint64_t)2 << 20)
/*
 * aipc__os_memfd_sealed's file in 2 MiB huge pages (hugetlbfs), its pages
 * reserved for it (so no later touch of it finds the pool empty); size a
 * multiple of AIPC_OS_HUGE_PAGE. -1 and errno (ENOMEM: the pool has too few
 * free pages, as where vm.nr_hugepages is 0) on failure. Its mappings must
 * sit on a 2 MiB boundary.
 */
int aipc__os_memfd_sealed_huge(const char *name, uint64_t size);
/*
 * Making an allocation's pages now rather than at first touch, as a device
 * commits its memory at allocation.
 *
 * Whether the host has size bytes to spare for pages made now: after them a
 * quarter of its memory stays available (MemAvailable). Cheap (sysinfo)
 * where free memory alone answers yes.
 */
bool aipc__os_memory_to_spare(uint64_t size);
/*
 * Gives the memfd fd (size bytes, a multiple of AIPC_OS_HUGE_PAGE) a first
 * page in each 2 MiB, which aipc__os_pages_make_huge needs to find there.
 * Contents stay zeros. 0, or -1 and errno.
 */
int aipc__os_memfd_seed_huge(int fd, uint64_t size);
/*
 * Makes the pages of [p, p + size), a shared writable mapping of a seeded
 * memfd on a 2 MiB boundary, transparent 2 MiB pages now (MADV_COLLAPSE:
 * Linux 6.1 and newer, whatever shmem_enabled says unless "deny"), mapped
 * here by their 2 MiB; an importer that maps them on a 2 MiB boundary reads
 * each with one fault. Contents are kept. 0; -1 and errno: EINVAL where the
 * kernel cannot (too old, or THP denied), EAGAIN or ENOMEM where it had no
 * free 2 MiB page for some of them.
 */
int aipc__os_pages_make_huge(void *p, size_t size);
/* Makes the pages of a shared writable mapping now (MADV_POPULATE_WRITE:
 * Linux 5.14 and newer), contents kept. 0, or -1 and errno (EINVAL: the
 * kernel cannot). */
int aipc__os_pages_make(void *p, size_t size);
/*
 * The same for a memfd no one maps yet (size bytes, a multiple of
 * AIPC_OS_HUGE_PAGE): made through a mapping of its own on a 2 MiB
 * boundary, given back before it returns; in transparent huge pages when
 * huge (seeded here), the rest (or all, where the kernel cannot) in normal
 * pages. 0, or -1 and errno: EINVAL where the kernel can make no pages on
 * request at all.
 */
int aipc__os_memfd_make_pages(int fd, uint64_t size, bool huge);
/*
 * Whether a memory file another process sent can be mapped shared and
 * writable and stay whole while mapped: a regular file (no pipe, socket,
 * eventfd...), a memfd (it takes seals), sealed against shrinking (else its
 * sender could cut it under the mapping: SIGBUS here) and growing, not
 * sealed against writing, at least min_size bytes (exactly, when exact),
 * in pages of 4 KiB unless huge_ok (then in pages of 4 KiB to 1 GiB).
 * Returns the first rule broken; *size gets the file's size when known,
 * *page its page size (4 KiB, or a hugetlbfs file's).
 */
#define AIPC_OS_FD_VERDICTS(X)                                                        \
  X(OK, "is fine")                                                                    \
  X(NOT_FILE, "is not a memory file (a pipe, socket or other descriptor)")            \
  X(NOT_MEMFD, "is not a memfd (a file that takes no seals)")                         \
  X(CAN_SHRINK, "is not sealed against shrinking")                                    \
  X(CAN_GROW, "is not sealed against growing")                                        \
  X(WRITE_SEALED, "is sealed against writing (this process writes to it)")            \
  X(HUGE_PAGES, "is in pages other than 4 KiB, which this kind of memory never is")  \
  X(TOO_SMALL, "is smaller than the range granted")                                   \
  X(WRONG_SIZE, "does not have the exact size expected")
typedef enum aipc__os_fd_verdict {
#define AIPC_OS_FD_ENUM_(name, text) AIPC_FD_##name,
  AIPC_OS_FD_VERDICTS(AIPC_OS_FD_ENUM_)
#undef AIPC_OS_FD_ENUM_
} aipc__os_fd_verdict;
aipc__os_fd_verdict aipc__os_fd_check_sealed(int fd, uint64_t min_size, bool exact, bool huge_ok, uint64_t *size,
                                             uint64_t *page);
/* The rule a verdict names, to follow "... that": "is not sealed against shrinking". */
const char *aipc__os_fd_verdict_text(aipc__os_fd_verdict v);
/* Maps size bytes of fd shared and writable; NULL on failure (errno set). */
void *aipc__os_map_shared(int fd, size_t size);
/*
 * What to tell the user when aipc__os_memfd* failed with errno e: for
 * EMFILE/ENFILE aipc__os_fd_limit_text, for ENOSYS (no memfd_create: Linux
 * before 3.17, or a sandbox that forbids it) what the emulator needs,
 * otherwise strerror(e). Returns buf or a constant string.
 */
const char *aipc__os_memfd_error_text(int e, char *buf, size_t cap);

/* ---- randomness ------------------------------------------------------------ */

/* getrandom(buf, n, 0): up to n bytes from the kernel's generator; the count,
 * or -1 and errno (EINTR: call again). */
ssize_t aipc__os_getrandom(void *buf, size_t n);
/* Sets n bytes at p, this process's memory, to value, without a signal
 * when part of it is not writable: 0, or -1 with errno (EFAULT: a page in
 * the range is unmapped or read-only; what came before it is set). */
int aipc__os_fill_checked(void *p, int value, size_t n);

/* ---- the descriptor limit -------------------------------------------------- */

/* Raises the soft RLIMIT_NOFILE to the hard one. True when that gave room. */
bool aipc__os_raise_fd_limit(void);
/* Says that this process is out of descriptors and what the limits are; returns buf. */
const char *aipc__os_fd_limit_text(char *buf, size_t cap);

/* ---- descriptors over Unix sockets ---------------------------------------- */

#define AIPC_OS_FDS_MAX 8 /* descriptors kept from one packet; more are closed */

/* What aipc__os_recv_fds saw besides the packet and its descriptors. */
#define AIPC_RECV_ODD 1u         /* other control messages, or a packet longer than the buffer */
#define AIPC_RECV_FDS_DROPPED 2u /* MSG_CTRUNC: descriptors were sent that did not arrive
                                    (the receiver out of descriptors, or more than fit) */

/* Who sent a packet, as the kernel recorded it at send time (SCM_CREDENTIALS). */
typedef struct aipc__os_sender {
  pid_t pid; /* 0: the packet carried no credentials */
  uid_t uid; /* one of the sender's real, effective or saved uids (the real one unless it chose) */
  gid_t gid;
} aipc__os_sender;

/*
 * Sends one packet of len bytes with nfds (0..2) descriptors attached
 * (SCM_RIGHTS), with the given send flags plus MSG_NOSIGNAL; retries on
 * EINTR. Returns what sendmsg returned, errno intact.
 */
ssize_t aipc__os_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags);
/*
 * Receives one packet into buf[0..cap) with the given recvmsg flags plus
 * MSG_CMSG_CLOEXEC. Descriptors that came with it go to fds and *nfds (the
 * caller owns them; any beyond AIPC_OS_FDS_MAX are closed); *seen gets
 * AIPC_RECV_* bits. Returns what recvmsg returned, errno intact.
 */
ssize_t aipc__os_recv_fds(int sock, void *buf, size_t cap, int flags, int fds[AIPC_OS_FDS_MAX], int *nfds,
                          unsigned *seen);
/*
 * The same, and the sender's credentials: on a socket with SO_PASSCRED the
 * kernel attaches them to every packet (SCM_CREDENTIALS) and they land in
 * *from (pid 0 when none came). Without from, credentials count as
 * AIPC_RECV_ODD like any other unexpected control message.
 */
ssize_t aipc__os_recv_fds_from(int sock, void *buf, size_t cap, int flags, int fds[AIPC_OS_FDS_MAX], int *nfds,
                               unsigned *seen, aipc__os_sender *from);
/* The kernel's view of the peer of a connected Unix socket (SO_PEERCRED: its
 * pid and effective uid when it connected). 0 or -1. */
int aipc__os_peer_cred(int sock, pid_t *pid, uid_t *uid);
/* SO_PASSCRED: every packet received on sock, and on the connections a
 * listening sock accepts, carries its sender's credentials. 0 or -1. */
int aipc__os_pass_credentials(int sock);
/*
 * Closes a connected SEQPACKET socket so that the peer still reads what was
 * sent to it: no more input (the peer's sends fail with EPIPE), what the
 * peer had queued is discarded (descriptors in it too; up to 64 packets),
 * then close. Closing with unread input would make the peer's next receive
 * fail with ECONNRESET instead of returning our last packet.
 */
void aipc__os_close_after_reply(int sock);

/* ---- processes ------------------------------------------------------------ */

/*
 * The start time of process pid (field 22 of /proc/<pid>/stat, in clock
 * ticks since boot): with the pid, it names one process for the life of
 * the system, since a pid is reused only by a process started later (one
 * started within the same tick, 10 ms, would look the same). 0, or
 * -1 with errno: ESRCH when no process has that pid, ENOSYS when /proc is
 * not mounted, EPROTO when the file cannot be parsed, or what open/read said.
 */
int aipc__os_process_start(pid_t pid, uint64_t *start);
/*
 * A pidfd naming the process at the other end of connected Unix socket sock,
 * whose SO_PEERCRED pid is pid: the very process that connected
 * (SO_PEERPIDFD, Linux 6.5), else the process that has pid now (pidfd_open,
 * Linux 5.3: the same one unless it ended between its connect and this
 * call). Close-on-exec. -1 with errno when neither is available, or ESRCH
 * when that process has ended.
 */
int aipc__os_peer_pidfd(int sock, pid_t pid);
/* Whether the process of pidfd has ended (a zombie has): one poll, no wait. */
bool aipc__os_pidfd_ended(int pidfd);

/* ---- waiting on many descriptors -------------------------------------------- */

/* An epoll instance, level-triggered, close-on-exec. -1 and errno on failure. */
int aipc__os_poller_create(void);
/* Watches fd for input; tag comes back from aipc__os_poller_wait. 0 or -1. */
int aipc__os_poller_add(int poller, int fd, void *tag);
void aipc__os_poller_del(int poller, int fd);
/* Waits up to timeout_ms (-1: no limit) for input; writes up to max tags. Returns their count (0 on EINTR). */
int aipc__os_poller_wait(int poller, void **tags, int max, int timeout_ms);

/* Whether fd has input (or an error) waiting: a poll that never sleeps. */
bool aipc__os_readable(int fd);
/* How many CPUs the machine has online (1 if unknown), asked once. */
int aipc__os_cpus_online(void);
/* Gives the CPU to another runnable thread, if there is one. */
void aipc__os_yield(void);

/* An eventfd another thread writes to wake a poller. -1 and errno on failure. */
int aipc__os_waker_create(void);
void aipc__os_waker_wake(int waker);
void aipc__os_waker_drain(int waker);

#endif
