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

/* ---- clocks ------------------------------------------------------------- */

/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t aipc__os_now_ms(void);
/* The same, from the coarse clock: no syscall, a few ms of resolution. */
uint64_t aipc__os_now_ms_coarse(void);

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
/* Maps size bytes of fd shared and writable; NULL on failure (errno set). */
void *aipc__os_map_shared(int fd, size_t size);

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
/* The kernel's view of the peer of a connected Unix socket (SO_PEERCRED). 0 or -1. */
int aipc__os_peer_cred(int sock, pid_t *pid, uid_t *uid);

/* ---- waiting on many descriptors -------------------------------------------- */

/* An epoll instance, level-triggered, close-on-exec. -1 and errno on failure. */
int aipc__os_poller_create(void);
/* Watches fd for input; tag comes back from aipc__os_poller_wait. 0 or -1. */
int aipc__os_poller_add(int poller, int fd, void *tag);
void aipc__os_poller_del(int poller, int fd);
/* Waits up to timeout_ms (-1: no limit) for input; writes up to max tags. Returns their count (0 on EINTR). */
int aipc__os_poller_wait(int poller, void **tags, int max, int timeout_ms);

/* An eventfd another thread writes to wake a poller. -1 and errno on failure. */
int aipc__os_waker_create(void);
void aipc__os_waker_wake(int waker);
void aipc__os_waker_drain(int waker);

#endif
