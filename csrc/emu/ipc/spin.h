/*
 * Polling before a blocking wait on the request/reply path (spin.c).
 *
 * Waking a thread that sleeps on another CPU of a virtual machine costs tens
 * of microseconds (the hypervisor must wake its idle vCPU), more than an
 * import's own work, and a round trip pays it twice. So a thread that
 * expects a packet soon polls for it for a while before it sleeps: the
 * importer waiting for a reply, the exporter's server thread between
 * requests. How long is learnt per waiter, as the kernel's haltpoll governor
 * learns it for idle CPUs: a wait that ended a little after the window grows
 * the window, one that ended long after shrinks it. A burst of imports polls,
 * a process whose packets come seldom soon stops polling. Never on a
 * machine with one CPU, where the peer could only answer once the poller
 * gave way; elsewhere every poll yields the CPU to any other thread that
 * wants it (the peer too, when both share one). ASCEND_IPC_POLL_US caps the
 * window (0: never poll).
 */
#ifndef ASCEND_IPC_EMU_IPC_SPIN_H_
#define ASCEND_IPC_EMU_IPC_SPIN_H_

#include <stdbool.h>
#include <stdint.h>

/* One waiter's window. Zero-initialised: no polling until it has learnt. */
typedef struct aipc__spin {
  uint64_t window_ns;
} aipc__spin;

/* A wait starting at start_ns (CLOCK_MONOTONIC) polls until the time this
 * returns; 0: it blocks at once. */
uint64_t aipc__spin_until(const aipc__spin *s, uint64_t start_ns);
/* Between two polls: yields the CPU, and says whether to poll again. */
bool aipc__spin_again(uint64_t until_ns);
/* A wait that took waited_ns from its start to its packet. */
void aipc__spin_learn(aipc__spin *s, uint64_t waited_ns);
/* How many waits of this process have polled (aipc__spin_until gave a
 * window): what a test can count where a clock would prove nothing. */
uint64_t aipc__spin_polled_waits(void);

#endif
