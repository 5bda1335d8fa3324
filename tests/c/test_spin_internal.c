/*
 * White-box tests of the poll window before IPC waits (emu/ipc/spin.h):
 * learnt as the haltpoll governor learns it, capped by ASCEND_IPC_POLL_US,
 * off when that is 0 or the machine has one CPU, and bounded in time.
 * Links libaipc_internal.a.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"

#include "emu/ipc/spin.h"
#include "os/os.h"

#define US 1000u

TEST(the_window_grows_from_nothing_to_the_cap) {
  aipc__spin s = {0};
  CHECK_EQ(aipc__spin_until(&s, 1000), 0); /* nothing learnt: block at once */
  uint64_t want[] = {10 * US, 20 * US, 40 * US, 80 * US, 100 * US, 100 * US};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    aipc__spin_learn(&s, 150 * US); /* came soon after the window: poll longer */
    CHECK_EQ(s.window_ns, want[i]);
  }
  aipc__spin_learn(&s, 30 * US); /* caught while polling: nothing to learn */
  CHECK_EQ(s.window_ns, 100 * US);
  if (aipc__os_cpus_online() >= 2) CHECK_EQ(aipc__spin_until(&s, 1000), 1000 + 100 * US);
}

TEST(waits_far_longer_than_any_window_stop_the_polling) {
  aipc__spin s = {100 * US};
  uint64_t want[] = {50 * US, 25 * US, 12500, 0, 0};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    aipc__spin_learn(&s, 5000 * US); /* 5 ms: polling never caught it */
    CHECK_EQ(s.window_ns, want[i]);
  }
  CHECK_EQ(aipc__spin_until(&s, 1000), 0);
}

TEST(the_variable_caps_the_window) {
  setenv("ASCEND_IPC_POLL_US", "30", 1); /* read once, at this process's first use */
  aipc__spin s = {0};
  for (int i = 0; i < 5; i++) aipc__spin_learn(&s, 50 * US);
  CHECK_EQ(s.window_ns, 30 * US);
  aipc__spin_learn(&s, 61 * US); /* over twice the cap: wasted */
  CHECK_EQ(s.window_ns, 15 * US);
  s.window_ns = 90 * US; /* one learnt under a larger cap still polls no longer than this one */
  if (aipc__os_cpus_online() >= 2) CHECK_EQ(aipc__spin_until(&s, 0), 30 * US);
}

TEST(zero_turns_polling_off) {
  setenv("ASCEND_IPC_POLL_US", "0", 1);
  aipc__spin s = {0};
  for (int i = 0; i < 5; i++) aipc__spin_learn(&s, 1 * US);
  CHECK_EQ(s.window_ns, 0);
  s.window_ns = 50 * US;
  CHECK_EQ(aipc__spin_until(&s, 1000), 0);
}

TEST(bad_values_keep_the_default) {
  setenv("ASCEND_IPC_POLL_US", "lots", 1);
  aipc__spin s = {0};
  for (int i = 0; i < 6; i++) aipc__spin_learn(&s, 150 * US);
  CHECK_EQ(s.window_ns, 100 * US);
}

TEST(polling_ends_at_its_deadline) {
  uint64_t start = aipc__os_now_ns(), until = start + 2000 * US;
  while (aipc__spin_again(until)) {
  }
  uint64_t took = aipc__os_now_ns() - start;
  CHECK(took >= 2000 * US);
  CHECK(took < 1000000 * US); /* a second: only a stopped machine takes that long */
}
