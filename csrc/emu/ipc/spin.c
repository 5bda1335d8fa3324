/* Polling before a blocking wait, with a learnt window (spin.h). */
#include <stdatomic.h>

#include "emu/emu.h"
#include "emu/ipc/spin.h"
#include "os/os.h"

/* The window a waiter that has not polled starts from when a wait shows
 * that polling would have caught its packet. */
#define START_NS 10000u

static _Atomic uint64_t g_polled_waits;

static uint64_t window_max(void) { return (uint64_t)aipc__config_get()->poll_us * 1000u; }

uint64_t aipc__spin_until(const aipc__spin *s, uint64_t start_ns) {
  uint64_t w = s->window_ns, max = window_max();
  if (w > max) w = max;
  if (w == 0 || aipc__os_cpus_online() < 2) return 0;
  atomic_fetch_add_explicit(&g_polled_waits, 1, memory_order_relaxed);
  return start_ns + w;
}

uint64_t aipc__spin_polled_waits(void) { return atomic_load_explicit(&g_polled_waits, memory_order_relaxed); }

bool aipc__spin_again(uint64_t until_ns) {
  aipc__os_yield();
  return aipc__os_now_ns() < until_ns;
}

void aipc__spin_learn(aipc__spin *s, uint64_t waited_ns) {
  uint64_t w = s->window_ns, max = window_max();
  if (waited_ns <= w) return; /* caught while polling */
  /* A wait that blocked includes its own wake-up, about as long again as a
   * cross-CPU round trip's share of it: up to twice the longest window, the
   * packet came soon enough for polling to catch it. */
  if (waited_ns <= 2 * max) {
    w = w < START_NS ? START_NS : w * 2;
    s->window_ns = w > max ? max : w;
  } else { /* it came long after any window: polling was wasted */
    w /= 2;
    s->window_ns = w < START_NS ? 0 : w;
  }
}
