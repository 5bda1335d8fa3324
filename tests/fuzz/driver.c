/*
 * A stand-in for libFuzzer's main, so the fuzz targets build and run with
 * gcc alone (clang: build them with -fsanitize=fuzzer instead and leave
 * this file out). It understands a subset of libFuzzer's command line:
 *
 *   fuzz_x [-runs=N] [-max_total_time=S] [-seed=N] [-max_len=N]
 *          [-timeout=S] [-artifact_prefix=P] [file|dir ...]
 *
 * Every file named (for a directory: every file in it) is run once, in
 * order: that is the corpus replay CI does. With -runs=N (N > 0) or
 * -max_total_time=S it then fuzzes: it takes an input of the corpus, applies
 * a few random mutations (bit flips, interesting values, insertions,
 * deletions, copies, crossovers with another input) and runs it, N times or
 * for S seconds. When the target is compiled with gcc's
 * -fsanitize-coverage=trace-pc, inputs that reach code no earlier input
 * reached join the corpus (and, like libFuzzer, are written into the first
 * directory named), so the search is coverage-guided; without it the
 * mutation is blind.
 *
 * A crash (a sanitizer report, abort, a signal) or an input that runs past
 * -timeout leaves the input in <artifact_prefix>crash-<hash> (or
 * timeout-<hash>) and ends the process with an error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
__attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

/* ---- coverage (gcc -fsanitize-coverage=trace-pc) ---------------------------------- */

#define COV_SIZE (1u << 16)
static uint8_t cov_now[COV_SIZE];  /* hit counts of the current run, saturating */
static uint8_t cov_seen[COV_SIZE]; /* union of the hit-count buckets of every kept input */
static int cov_active;             /* the target is instrumented */

void __sanitizer_cov_trace_pc(void);
void __sanitizer_cov_trace_pc(void) {
  uintptr_t pc = (uintptr_t)__builtin_return_address(0);
  uint32_t h = (uint32_t)(pc ^ (pc >> 15) ^ (pc >> 31)) & (COV_SIZE - 1);
  if (cov_now[h] != 255) cov_now[h]++;
  cov_active = 1;
}

static uint8_t bucket(uint8_t n) {
  if (n == 0) return 0;
  if (n == 1) return 1;
  if (n == 2) return 2;
  if (n == 3) return 4;
  if (n < 8) return 8;
  if (n < 16) return 16;
  if (n < 32) return 32;
  if (n < 128) return 64;
  return 128;
}

/* Merges this run's coverage; returns how many new (block, bucket) pairs it had. */
static int cov_merge(void) {
  int fresh = 0;
  for (uint32_t i = 0; i < COV_SIZE; i++) {
    if (!cov_now[i]) continue;
    uint8_t b = bucket(cov_now[i]);
    if (!(cov_seen[i] & b)) {
      cov_seen[i] |= b;
      fresh++;
    }
    cov_now[i] = 0;
  }
  return fresh;
}

static int cov_blocks(void) {
  int n = 0;
  for (uint32_t i = 0; i < COV_SIZE; i++) n += cov_seen[i] != 0;
  return n;
}

/* ---- the corpus -------------------------------------------------------------------- */

typedef struct unit {
  uint8_t *data;
  size_t size;
} unit;

static unit *corpus;
static size_t n_corpus, cap_corpus;

static void corpus_add(const uint8_t *d, size_t n) {
  if (n_corpus == cap_corpus) {
    cap_corpus = cap_corpus ? cap_corpus * 2 : 64;
    corpus = realloc(corpus, cap_corpus * sizeof *corpus);
    if (!corpus) abort();
  }
  uint8_t *c = malloc(n ? n : 1);
  if (!c) abort();
  memcpy(c, d, n);
  corpus[n_corpus++] = (unit){c, n};
}

static uint64_t fnv(const uint8_t *d, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
  return h;
}

/* ---- crash artifacts ------------------------------------------------------------------ */

static const char *artifact_prefix = "./";
static const uint8_t *cur_data;
static size_t cur_size;
static volatile sig_atomic_t dumping;

static void write_artifact(const char *kind) {
  if (dumping || !cur_data) return;
  dumping = 1;
  char path[4096];
  snprintf(path, sizeof path, "%s%s-%016llx", artifact_prefix, kind, (unsigned long long)fnv(cur_data, cur_size));
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(cur_data, 1, cur_size, f);
    fclose(f);
    fprintf(stderr, "==driver== %s: input of %zu bytes written to %s\n", kind, cur_size, path);
  }
}

static void on_death(void) { write_artifact("crash"); }

static void on_signal(int sig) {
  write_artifact(sig == SIGALRM ? "timeout" : "crash");
  if (sig == SIGALRM) {
    fprintf(stderr, "==driver== an input ran longer than the timeout\n");
    _exit(70);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* ---- mutations --------------------------------------------------------------------------- */

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const uint64_t interesting[] = {0,    1,    2,      3,          4,          7,          8,         16,
                                       24,   32,   40,     56,         64,         127,        128,       255,
                                       256,  511,  512,    4095,       4096,       4097,       65535,     65536,
                                       0x7fffffff, 0x80000000u, 0xffffffffu, 0x43504941u /* "AIPC" */, 16384,
                                       0xffffffffffffffffull, 0x8000000000000000ull, 1ull << 47};

static const char *const dict[] = {"aipc2.", "AIPC", "A", "_", "-", "=", "\0", "AAAA", "////"};

static size_t mutate(uint8_t *d, size_t n, size_t max) {
  int k = 1 + (int)(rnd() % 6);
  for (int m = 0; m < k; m++) {
    uint64_t r = rnd();
    switch (r % 11) {
      case 0: /* flip a bit */
        if (n) d[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 1: /* a random byte */
        if (n) d[rnd() % n] = (uint8_t)rnd();
        break;
      case 2: { /* an interesting value, 1/2/4/8 bytes little-endian */
        size_t w = (size_t)1 << (rnd() % 4);
        if (n < w) break;
        uint64_t v = interesting[rnd() % (sizeof interesting / sizeof *interesting)];
        if (rnd() & 1) v = 0 - v;
        size_t at = rnd() % (n - w + 1);
        for (size_t i = 0; i < w; i++) d[at + i] = (uint8_t)(v >> (8 * i));
        break;
      }
      case 3: { /* insert bytes */
        size_t c = 1 + rnd() % 8;
        if (n + c > max) break;
        size_t at = n ? rnd() % (n + 1) : 0;
        memmove(d + at + c, d + at, n - at);
        for (size_t i = 0; i < c; i++) d[at + i] = (uint8_t)rnd();
        n += c;
        break;
      }
      case 4: { /* delete a range */
        if (!n) break;
        size_t at = rnd() % n, c = 1 + rnd() % (n - at < 16 ? n - at : 16);
        memmove(d + at, d + at + c, n - at - c);
        n -= c;
        break;
      }
      case 5: { /* copy a range within */
        if (n < 2) break;
        size_t from = rnd() % n, to = rnd() % n, c = 1 + rnd() % (n - (from > to ? from : to));
        memmove(d + to, d + from, c);
        break;
      }
      case 6: { /* crossover: splice in part of another input */
        if (!n_corpus) break;
        unit *u = &corpus[rnd() % n_corpus];
        if (!u->size) break;
        size_t from = rnd() % u->size, c = 1 + rnd() % (u->size - from);
        size_t at = n ? rnd() % (n + 1) : 0;
        if (rnd() & 1) { /* overwrite */
          if (at + c > n) c = n - at;
          memcpy(d + at, u->data + from, c);
        } else if (n + c <= max) { /* insert */
          memmove(d + at + c, d + at, n - at);
          memcpy(d + at, u->data + from, c);
          n += c;
        }
        break;
      }
      case 7: { /* a dictionary word */
        const char *w = dict[rnd() % (sizeof dict / sizeof *dict)];
        size_t c = strlen(w) ? strlen(w) : 1;
        if (n < c) break;
        memcpy(d + rnd() % (n - c + 1), w, c);
        break;
      }
      case 8: /* truncate */
        if (n) n = rnd() % n;
        break;
      case 9: /* append */
        if (n < max) d[n++] = (uint8_t)rnd();
        break;
      default: /* increment or decrement a byte */
        if (n) d[rnd() % n] += (uint8_t)((rnd() & 1) ? 1 : -1);
        break;
    }
  }
  return n;
}

/* ---- running ------------------------------------------------------------------------------- */

static unsigned timeout_s = 10;

static void run(const uint8_t *d, size_t n) {
  /* a heap copy of exactly n bytes, so ASan sees any read past the end */
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) abort();
  memcpy(copy, d, n);
  cur_data = copy;
  cur_size = n;
  if (timeout_s) alarm(timeout_s);
  LLVMFuzzerTestOneInput(copy, n);
  if (timeout_s) alarm(0);
  cur_data = NULL;
  free(copy);
}

static int read_file(const char *path, uint8_t **out, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 4096, len = 0;
  uint8_t *b = malloc(cap);
  for (;;) {
    if (len == cap) b = realloc(b, cap *= 2);
    size_t r = fread(b + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  fclose(f);
  *out = b;
  *n = len;
  return 0;
}

static void corpus_free(void) {
  for (size_t i = 0; i < n_corpus; i++) free(corpus[i].data);
  free(corpus);
  corpus = NULL;
  n_corpus = cap_corpus = 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs (and keeps) one file, or every file of a directory, in name order. */
static size_t replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "==driver== %s: %s\n", path, strerror(errno));
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    uint8_t *d;
    size_t n;
    if (read_file(path, &d, &n) != 0) return 0;
    run(d, n);
    cov_merge();
    corpus_add(d, n);
    free(d);
    return 1;
  }
  DIR *dir = opendir(path);
  if (!dir) return 0;
  char **names = NULL;
  size_t nn = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (nn + 1) * sizeof *names);
    names[nn++] = strdup(e->d_name);
  }
  closedir(dir);
  if (nn) qsort(names, nn, sizeof *names, cmp_str);
  size_t ran = 0;
  for (size_t i = 0; i < nn; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, names[i]);
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) ran += replay(p);
    free(names[i]);
  }
  free(names);
  return ran;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long long runs = -1;
  double max_time = 0;
  size_t max_len = 4096;
  uint64_t seed = 0;
  const char *out_dir = NULL;
  const char **inputs = calloc((size_t)argc, sizeof *inputs);
  int n_inputs = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "-runs=", 6)) runs = atoll(a + 6);
    else if (!strncmp(a, "-max_total_time=", 16)) max_time = atof(a + 16);
    else if (!strncmp(a, "-seed=", 6)) seed = strtoull(a + 6, NULL, 0);
    else if (!strncmp(a, "-max_len=", 9)) max_len = (size_t)atoll(a + 9);
    else if (!strncmp(a, "-timeout=", 9)) timeout_s = (unsigned)atoi(a + 9);
    else if (!strncmp(a, "-artifact_prefix=", 17)) artifact_prefix = a + 17;
    else if (!strncmp(a, "-print_final_stats=", 19)) continue; /* it always prints them */
    else if (a[0] == '-') fprintf(stderr, "==driver== ignoring %s (libFuzzer option)\n", a);
    else inputs[n_inputs++] = a;
  }
  if (max_len < 1) max_len = 1;
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
  signal(SIGABRT, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGILL, on_signal);
  signal(SIGALRM, on_signal);
  if (!__sanitizer_set_death_callback) {
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
  }

  double t0 = now();
  size_t replayed = 0;
  for (int i = 0; i < n_inputs; i++) {
    struct stat st;
    if (!out_dir && stat(inputs[i], &st) == 0 && S_ISDIR(st.st_mode)) out_dir = inputs[i];
    replayed += replay(inputs[i]);
  }
  fprintf(stderr, "==driver== replayed %zu input(s) in %.2f s%s\n", replayed, now() - t0,
          cov_active ? "" : " (target not instrumented: blind mutation)");
  int fuzzing = runs > 0 || max_time > 0;
  if (!fuzzing) {
    printf("Done %zu runs in %.0f second(s)\n", replayed, now() - t0);
    corpus_free();
    free(inputs);
    return 0;
  }
  if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  rng = seed | 1;
  fprintf(stderr, "==driver== fuzzing with seed %llu, inputs up to %zu bytes%s%s\n", (unsigned long long)seed,
          max_len, out_dir ? ", new inputs into " : "", out_dir ? out_dir : "");
  if (!n_corpus) corpus_add((const uint8_t *)"", 0);
  uint8_t *buf = malloc(max_len);
  long long done = 0;
  size_t saved = 0;
  double t1 = now(), last_report = t1;
  while ((runs <= 0 || done < runs) && (max_time <= 0 || now() - t1 < max_time)) {
    unit *u = &corpus[rnd() % n_corpus];
    size_t n = u->size > max_len ? max_len : u->size;
    memcpy(buf, u->data, n);
    n = mutate(buf, n, max_len);
    run(buf, n);
    done++;
    if (cov_active && cov_merge() > 0) {
      corpus_add(buf, n);
      if (out_dir) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%016llx", out_dir, (unsigned long long)fnv(buf, n));
        FILE *f = fopen(p, "wb");
        if (f) {
          fwrite(buf, 1, n, f);
          fclose(f);
          saved++;
        }
      }
    }
    if (now() - last_report > 10) {
      last_report = now();
      fprintf(stderr, "==driver== #%lld corpus %zu coverage %d exec/s %.0f\n", done, n_corpus, cov_blocks(),
              (double)done / (now() - t1));
    }
  }
  double dt = now() - t1;
  fprintf(stderr, "==driver== %lld mutated inputs in %.1f s (%.0f exec/s); corpus %zu (%zu new saved), coverage %d\n",
          done, dt, dt > 0 ? (double)done / dt : 0.0, n_corpus, saved, cov_blocks());
  printf("Done %lld runs in %.0f second(s)\n", done + (long long)replayed, now() - t0);
  free(buf);
  corpus_free();
  free(inputs);
  return 0;
}
