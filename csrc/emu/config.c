/*
 * Environment, read once per process. A value that does not parse or is
 * out of range falls back to its default, silently: a bad variable must not
 * break a program that never asked for the emulator's extras.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_internal.h"

#define DEFAULT_DEVICES 8u
#define DEFAULT_MEMORY (64ull << 30)
#define MAX_MEMORY (1ull << 46) /* the arena reserves twice this in address space */
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_POLL_US 100

static aipc__config g_config;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Parses a decimal integer with an optional K/M/G/T suffix (powers of 1024,
 * optional trailing "B"/"iB"). Returns 0 and *out, or -1. */
static int parse_u64(const char *s, bool suffix, uint64_t *out) {
  if (!s) return -1;
  while (isspace((unsigned char)*s)) s++;
  if (!isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  if (suffix && *end) {
    switch (toupper((unsigned char)*end)) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return -1;
    }
    end++;
    if (toupper((unsigned char)*end) == 'I') end++;
    if (toupper((unsigned char)*end) == 'B') end++;
  }
  while (isspace((unsigned char)*end)) end++;
  if (*end) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

static uint64_t env_u64(const char *name, bool suffix, uint64_t lo, uint64_t hi, uint64_t dflt) {
  uint64_t v;
  if (parse_u64(getenv(name), suffix, &v) != 0 || v < lo || v > hi) return dflt;
  return v;
}

static void load(void) {
  g_config.devices = (uint32_t)env_u64("ASCEND_IPC_EMU_DEVICES", false, 1, AIPC_MAX_DEVICES, DEFAULT_DEVICES);
  uint64_t mem = env_u64("ASCEND_IPC_EMU_MEMORY", true, 1, MAX_MEMORY, DEFAULT_MEMORY);
  g_config.memory = (mem + AIPC_PAGE_SIZE - 1) & ~(uint64_t)(AIPC_PAGE_SIZE - 1);
  g_config.strict = env_u64("ASCEND_IPC_STRICT", false, 0, 1, 0) == 1;
  uint64_t sdid;
  g_config.sdid_set = parse_u64(getenv("ASCEND_IPC_SDID"), false, &sdid) == 0 && sdid <= UINT32_MAX;
  g_config.sdid = g_config.sdid_set ? (uint32_t)sdid : 0;
  /* The super-node rendezvous: one directory per user (ipc/supernode.c checks it). */
  const char *dir = getenv("ASCEND_IPC_SUPERNODE_DIR");
  if (dir && *dir) {
    if (strlen(dir) < sizeof g_config.supernode_dir) strcpy(g_config.supernode_dir, dir);
  } else {
    snprintf(g_config.supernode_dir, sizeof g_config.supernode_dir, "/tmp/ascend_ipc-supernode.%u", (unsigned)geteuid());
  }
  g_config.timeout_ms = (int)env_u64("ASCEND_IPC_TIMEOUT_MS", false, 1, 24u * 3600 * 1000, DEFAULT_TIMEOUT_MS);
  g_config.poll_us = (uint32_t)env_u64("ASCEND_IPC_POLL_US", false, 0, 10000, DEFAULT_POLL_US);
  g_config.pages = (int)env_u64("ASCEND_IPC_HUGE_PAGES", false, AIPC_PAGES_AT_TOUCH, AIPC_PAGES_NOW, AIPC_PAGES_NOW);
}

const aipc__config *aipc__config_get(void) {
  pthread_once(&g_once, load);
  return &g_config;
}
