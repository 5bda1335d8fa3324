/*
 * The runtime's built-in stream tasks that compute on device memory:
 * value writes and waits (aclrtValueWrite, aclrtValueWait), reductions
 * (aclrtReduceAsync) and random numbers (aclrtRandomNumAsync).
 *
 * Each is checked when queued (argument errors come back at once) and runs
 * on the stream's worker, in order with the rest of its work, touching the
 * memory only through aipc__mem_run_on_device, so a free or an IPC close in
 * between is an error of the task (reported by aclrtSynchronizeStream),
 * never a fault.
 *
 * Value words are 64-bit, 8-byte aligned, read and written atomically; a
 * write wakes the futex of the word's low half, which is shared across
 * processes when the memory is (an imported allocation is the same memfd
 * page), so a wait in one process on a word that another process's stream
 * writes wakes at once. A wait re-reads at least every AIPC_TASK_POLL_MS,
 * for words that plain copies change, and gives up when its stream is
 * aborted, stopped or destroyed by force.
 *
 * Random numbers: Philox4x32-10 (Salmon et al., SC'11), keyed by the seed;
 * element i of a task is computed from counter block (offset + i), where
 * offset is the 64-bit word at randomCounterAddr, so a (seed, offset) pair
 * always gives the same numbers. The counter is read, not advanced.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"
#include "os/os.h"

static void free_plain(aipc__task *t) { free(t); }

/* ---- value write and wait -------------------------------------------------- */

typedef struct value_task {
  aipc__task t;
  uint64_t *addr;
  uint64_t value;
  uint32_t flag;
} value_task;

typedef struct word_op {
  uint64_t *addr;
  uint64_t value; /* to store, or what was loaded */
} word_op;

static void store_word(void *arg) {
  word_op *o = arg;
  __atomic_store_n(o->addr, o->value, __ATOMIC_SEQ_CST);
}

static void load_word(void *arg) {
  word_op *o = arg;
  o->value = __atomic_load_n(o->addr, __ATOMIC_SEQ_CST);
}

static aclError check_word(const char *call, void *devAddr) {
  if (!devAddr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: devAddr is NULL", call);
  if ((uintptr_t)devAddr % 8)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: devAddr %p is not 8-byte aligned (the word is 64-bit)", call,
                      devAddr);
  return aipc__mem_run_on_device(call, devAddr, sizeof(uint64_t), NULL, 0, NULL, NULL);
}

static aclError run_value_write(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  (void)cancel;
  value_task *v = (value_task *)t;
  word_op o = {v->addr, v->value};
  aclError rc = aipc__mem_run_on_device("aclrtValueWrite (running on the stream)", v->addr, sizeof *v->addr, NULL, 0,
                                        store_word, &o);
  if (rc == ACL_SUCCESS) aipc__os_futex_wake_all((const uint32_t *)v->addr); /* harmless if unmapped since */
  return rc;
}

static bool value_met(uint32_t flag, uint64_t cur, uint64_t value) {
  switch (flag) {
    case ACL_STREAM_WAIT_VALUE_GEQ: return (int64_t)(cur - value) >= 0;
    case ACL_STREAM_WAIT_VALUE_EQ: return cur == value;
    case ACL_STREAM_WAIT_VALUE_AND: return (cur & value) != 0;
    default: return ~(cur | value) != 0; /* NOR */
  }
}

static aclError run_value_wait(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  value_task *v = (value_task *)t;
  const char *call = "aclrtValueWait (running on the stream)";
  int slice = 1;
  for (;;) {
    word_op o = {v->addr, 0};
    aclError rc = aipc__mem_run_on_device(call, v->addr, sizeof *v->addr, NULL, 0, load_word, &o);
    if (rc) return rc;
    if (value_met(v->flag, o.value, v->value)) return ACL_SUCCESS;
    if (cancel && atomic_load(cancel))
      return aipc__fail(ACL_ERROR_RT_STREAM_ABORT, "%s: the wait on %p was cancelled with its stream", call,
                        (void *)v->addr);
    /* Sleeps on the low half; a write of either half wakes it, and the
     * slice catches words that plain copies change. */
    aipc__os_futex_wait((const uint32_t *)v->addr, (uint32_t)o.value, slice);
    if (slice < AIPC_TASK_POLL_MS) slice = slice * 2 > AIPC_TASK_POLL_MS ? AIPC_TASK_POLL_MS : slice * 2;
  }
}

static aclError value_submit(const char *call, void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream,
                             bool wait) {
  aclError rc = check_word(call, devAddr);
  if (rc) return rc;
  int32_t dev;
  if ((rc = aipc__stream_device(call, stream, &dev))) return rc;
  value_task *v = malloc(sizeof *v);
  if (!v) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  *v = (value_task){{NULL, wait ? run_value_wait : run_value_write, free_plain, NULL}, devAddr, value, flag};
  return aipc__stream_submit(call, stream, &v->t);
}

aclError aipc__emu_value_write(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(value_write);
  if (flag != 0) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: flag 0x%x is reserved and must be 0", call, flag);
  return value_submit(call, devAddr, value, flag, stream, false);
}

aclError aipc__emu_value_wait(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream) {
  const char *call = AIPC_CALL_NAME(value_wait);
  if (flag > ACL_STREAM_WAIT_VALUE_NOR)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: flag 0x%x is not ACL_STREAM_WAIT_VALUE_GEQ, _EQ, _AND or _NOR (0..3)", call, flag);
  return value_submit(call, devAddr, value, flag, stream, true);
}

/* ---- 16-bit floats -------------------------------------------------------------- */

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        man <<= 1;
        e++;
      } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Round to nearest, ties to even; overflow to infinity; NaN stays NaN. */
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00;   /* NaN */
  if (ax >= 0x477ff000u) return sign | 0x7c00;  /* 65520 and up round to infinity */
  if (ax >= 0x38800000u) {                      /* a normal half: round the 13 dropped bits */
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
  }
  if (ax < 0x33000000u) return sign; /* at most half the smallest subnormal: zero */
  /* A subnormal half q * 2^-24 from m * 2^(e-150). */
  int e = (int)(ax >> 23), shift = 126 - e; /* 14..24 */
  uint32_t m = (ax & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return sign | (uint16_t)q;
}

static float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ---- reduce ----------------------------------------------------------------------- */

typedef struct reduce_task {
  aipc__task t;
  void *dst;
  const void *src;
  uint64_t count;
  aclrtReduceKind kind;
  aclDataType type;
} reduce_task;

static size_t reduce_elem(aclDataType t) {
  switch (t) {
    case ACL_INT8: return 1;
    case ACL_INT16:
    case ACL_FLOAT16:
    case ACL_BF16: return 2;
    case ACL_INT32:
    case ACL_UINT32:
    case ACL_FLOAT: return 4;
    default: return 0;
  }
}

#define REDUCE_LOOP(T, OP)                                              \
  do {                                                                  \
    T *d = (T *)r->dst;                                                 \
    const T *s = (const T *)r->src;                                     \
    for (size_t i = 0; i < n; i++) d[i] = OP(d[i], s[i]);               \
  } while (0)
#define R_MAX(a, b) ((a) < (b) ? (b) : (a))
#define R_MIN(a, b) ((b) < (a) ? (b) : (a))
/* Integer sums wrap, as the hardware's do. */
#define R_SUM_I8(a, b) ((int8_t)(uint8_t)((uint8_t)(a) + (uint8_t)(b)))
#define R_SUM_I16(a, b) ((int16_t)(uint16_t)((uint16_t)(a) + (uint16_t)(b)))
#define R_SUM_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define R_SUM(a, b) ((a) + (b))

static float fmaxf_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : (a < b ? b : a); }
static float fminf_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : (b < a ? b : a); }

static float combine(aclrtReduceKind k, float a, float b) {
  return k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM ? a + b
         : k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX ? fmaxf_nan(a, b)
                                                 : fminf_nan(a, b);
}

static void reduce_now(void *arg) {
  reduce_task *r = arg;
  size_t n = (size_t)(r->count / reduce_elem(r->type));
  aclrtReduceKind k = r->kind;
  switch (r->type) {
    case ACL_INT8:
      if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM) REDUCE_LOOP(int8_t, R_SUM_I8);
      else if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX) REDUCE_LOOP(int8_t, R_MAX);
      else REDUCE_LOOP(int8_t, R_MIN);
      break;
    case ACL_INT16:
      if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM) REDUCE_LOOP(int16_t, R_SUM_I16);
      else if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX) REDUCE_LOOP(int16_t, R_MAX);
      else REDUCE_LOOP(int16_t, R_MIN);
      break;
    case ACL_INT32:
      if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM) REDUCE_LOOP(int32_t, R_SUM_I32);
      else if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX) REDUCE_LOOP(int32_t, R_MAX);
      else REDUCE_LOOP(int32_t, R_MIN);
      break;
    case ACL_UINT32:
      if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM) REDUCE_LOOP(uint32_t, R_SUM);
      else if (k == ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX) REDUCE_LOOP(uint32_t, R_MAX);
      else REDUCE_LOOP(uint32_t, R_MIN);
      break;
    case ACL_FLOAT: {
      float *d = r->dst;
      const float *s = r->src;
      for (size_t i = 0; i < n; i++) d[i] = combine(k, d[i], s[i]);
      break;
    }
    case ACL_FLOAT16:
    case ACL_BF16: { /* computed in float, rounded once */
      bool half = r->type == ACL_FLOAT16;
      uint16_t *d = r->dst;
      const uint16_t *s = r->src;
      for (size_t i = 0; i < n; i++) {
        float a = half ? half_to_float(d[i]) : bf16_to_float(d[i]);
        float b = half ? half_to_float(s[i]) : bf16_to_float(s[i]);
        float c = combine(k, a, b);
        d[i] = half ? float_to_half(c) : float_to_bf16(c);
      }
      break;
    }
    default: break; /* refused when queued */
  }
}

static aclError run_reduce(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  (void)cancel;
  reduce_task *r = (reduce_task *)t;
  return aipc__mem_run_on_device("aclrtReduceAsync (running on the stream)", r->dst, (size_t)r->count, r->src,
                                 (size_t)r->count, reduce_now, r);
}

aclError aipc__emu_reduce_async(void *dst, const void *src, uint64_t count, aclrtReduceKind kind, aclDataType type,
                                aclrtStream stream, void *reserve) {
  const char *call = AIPC_CALL_NAME(reduce_async);
  if (!dst) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: dst is NULL", call);
  if (!src) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: src is NULL", call);
  if (reserve) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: reserve must be NULL", call);
  if (kind == ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL has no documented result; the emulator does SUM, MAX "
                      "and MIN",
                      call);
  if (kind != ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM && kind != ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX &&
      kind != ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: kind %d is not an aclrtReduceKind (10..13)", call, (int)kind);
  size_t es = reduce_elem(type);
  if (!es)
    return aipc__fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "%s: data type %d cannot be reduced (ACL_INT8, _INT16, _INT32, _UINT32, _FLOAT16, _FLOAT, "
                      "_BF16 can)",
                      call, (int)type);
  if (count % es)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count %llu bytes is not a whole number of %zu-byte elements",
                      call, (unsigned long long)count, es);
  if (count > SIZE_MAX) return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count is too large", call);
  int32_t dev;
  aclError rc = aipc__stream_device(call, stream, &dev);
  if (rc || count == 0) return rc;
  if ((rc = aipc__mem_run_on_device(call, dst, (size_t)count, src, (size_t)count, NULL, NULL))) return rc;
  aipc__block b;
  const void *ptrs[2] = {dst, src};
  for (int i = 0; i < 2; i++)
    if (aipc__mem_lookup(ptrs[i], &b) && b.device != dev)
      return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                        "%s: %s %p is memory of device %d and the stream belongs to device %d: a reduction works on "
                        "its stream's device",
                        call, i ? "src" : "dst", ptrs[i], (int)b.device, (int)dev);
  reduce_task *r = malloc(sizeof *r);
  if (!r) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  *r = (reduce_task){{NULL, run_reduce, free_plain, NULL}, dst, src, count, kind, type};
  return aipc__stream_submit(call, stream, &r->t);
}

/* ---- random numbers --------------------------------------------------------------- */

typedef struct philox {
  uint32_t c[4];
} philox;

/* Philox4x32-10: counter c under key (k0, k1). */
static philox philox_block(uint64_t key, uint64_t block, uint32_t attempt) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = attempt, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (philox){{c0, c1, c2, c3}};
}

/* [0, 1) with 24 random bits (exact in float), and (0, 1] for logarithms. */
static double unit24(uint32_t w) { return (double)(w >> 8) * (1.0 / 16777216.0); }
static double unit_open(uint32_t w) { return ((double)w + 1.0) * (1.0 / 4294967296.0); }

typedef struct random_task {
  aipc__task t;
  aclrtRandomNumTaskInfo info; /* a copy: the caller's may go once queued */
  uint8_t a[8], b[8];          /* min/max, mean/stddev, or the dropout ratio in a: values given */
  uint64_t seed, num;          /* values given */
} random_task;

static size_t random_elem(aclDataType t) {
  switch (t) {
    case ACL_FLOAT16:
    case ACL_BF16: return 2;
    case ACL_FLOAT:
    case ACL_INT32:
    case ACL_UINT32: return 4;
    case ACL_INT64:
    case ACL_UINT64: return 8;
    default: return 0;
  }
}

static bool is_float(aclDataType t) { return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16; }

/* The bytes of one parameter given as a value (a parameter given by
 * address is read when the task runs). */
static aclError para_bytes(const char *call, const char *what, const aclrtRandomParaInfo *p, size_t want,
                           uint8_t out[8]) {
  memset(out, 0, 8);
  if (p->isAddr > 1)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %s.isAddr is %u (0: a value, 1: an address)", call, what,
                      p->isAddr);
  if (p->isAddr == 1) {
    uint64_t a;
    memcpy(&a, p->valueOrAddr, sizeof a);
    if (!a) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: %s is given by address, and the address is NULL", call, what);
    return ACL_SUCCESS;
  }
  if (p->size != want && !(want == 8 && p->size == 4))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %s.size is %u bytes; this parameter takes %zu", call, what,
                      p->size, want);
  memcpy(out, p->valueOrAddr, p->size);
  return ACL_SUCCESS;
}

/* A parameter as a double in the task's data type. */
static double para_value(aclDataType t, const uint8_t b[8]) {
  uint16_t h;
  float f;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  switch (t) {
    case ACL_FLOAT16: memcpy(&h, b, 2); return half_to_float(h);
    case ACL_BF16: memcpy(&h, b, 2); return bf16_to_float(h);
    case ACL_FLOAT: memcpy(&f, b, 4); return f;
    case ACL_INT32: memcpy(&i32, b, 4); return i32;
    case ACL_UINT32: memcpy(&u32, b, 4); return u32;
    case ACL_INT64: memcpy(&i64, b, 8); return (double)i64;
    default: memcpy(&u64, b, 8); return (double)u64;
  }
}

static void put_float(aclDataType t, void *out, size_t i, double v) {
  if (t == ACL_FLOAT)
    ((float *)out)[i] = (float)v;
  else if (t == ACL_FLOAT16)
    ((uint16_t *)out)[i] = float_to_half((float)v);
  else
    ((uint16_t *)out)[i] = float_to_bf16((float)v);
}

/* What one run generates from. */
typedef struct random_run {
  const aclrtRandomNumTaskInfo *in;
  uint8_t a[8], b[8];
  uint64_t seed, num;
} random_run;

static size_t result_bytes(const aclrtRandomNumTaskInfo *in, uint64_t num) {
  size_t n = in->randomNumFuncParaInfo.funcType == ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK
                 ? (size_t)((num + 7) / 8)
                 : (size_t)num * random_elem(in->dataType);
  return n ? n : 1;
}

/* Under the memory lock: the offset read, the numbers written. */
static void generate(void *arg) {
  const random_run *g = arg;
  const aclrtRandomNumTaskInfo *in = g->in;
  aclDataType t = in->dataType;
  void *out = in->randomResultAddr;
  uint64_t n = g->num, seed = g->seed, offset;
  memcpy(&offset, in->randomCounterAddr, sizeof offset);
  switch (in->randomNumFuncParaInfo.funcType) {
    case ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK: {
      double ratio = para_value(t, g->a); /* the share of elements dropped: their bit is 0 */
      uint8_t *bits = out;
      memset(bits, 0, (size_t)((n + 7) / 8));
      for (uint64_t i = 0; i < n; i++)
        if (unit24(philox_block(seed, offset + i, 0).c[0]) >= ratio) bits[i / 8] |= (uint8_t)(1u << (i % 8));
      break;
    }
    case ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS:
      if (is_float(t)) {
        double lo = para_value(t, g->a), hi = para_value(t, g->b);
        for (uint64_t i = 0; i < n; i++)
          put_float(t, out, (size_t)i, lo + unit24(philox_block(seed, offset + i, 0).c[0]) * (hi - lo));
      } else { /* [min, max), as a span of 64-bit offsets from min */
        bool wide = random_elem(t) == 8, sgn = t == ACL_INT32 || t == ACL_INT64;
        uint64_t lo = 0, hi = 0;
        memcpy(&lo, g->a, wide ? 8 : 4);
        memcpy(&hi, g->b, wide ? 8 : 4);
        if (!wide && sgn) {
          lo = (uint64_t)(int64_t)(int32_t)(uint32_t)lo;
          hi = (uint64_t)(int64_t)(int32_t)(uint32_t)hi;
        }
        uint64_t span = hi - lo;
        for (uint64_t i = 0; i < n; i++) {
          philox p = philox_block(seed, offset + i, 0);
          uint64_t r64 = ((uint64_t)p.c[1] << 32) | p.c[0], v = lo + (span ? r64 % span : 0);
          if (wide)
            ((uint64_t *)out)[i] = v;
          else
            ((uint32_t *)out)[i] = (uint32_t)v;
        }
      }
      break;
    default: { /* normal, truncated normal */
      bool trunc = in->randomNumFuncParaInfo.funcType == ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS;
      double mean = para_value(t, g->a), sd = para_value(t, g->b);
      for (uint64_t i = 0; i < n; i++) {
        double z = 0;
        /* Box-Muller; truncated: values beyond two standard deviations
         * are drawn again from the next attempt's block, as TensorFlow's
         * and PyTorch's truncated normals do. */
        for (uint32_t attempt = 0;; attempt++) {
          philox p = philox_block(seed, offset + i, attempt);
          double rad = sqrt(-2.0 * log(unit_open(p.c[0]))), ang = 6.283185307179586 * unit24(p.c[1]);
          z = rad * cos(ang);
          if (!trunc || fabs(z) <= 2.0) break;
          z = rad * sin(ang);
          if (fabs(z) <= 2.0) break;
        }
        put_float(t, out, (size_t)i, mean + sd * z);
      }
      break;
    }
  }
}

typedef struct dev_read {
  const void *src;
  size_t n;
  uint8_t *out;
} dev_read;

static void read_bytes(void *arg) {
  dev_read *d = arg;
  memcpy(d->out, d->src, d->n);
}

/* A parameter given by address, read from device memory (checked and read
 * under one hold of the lock). */
static aclError read_para(const char *call, const aclrtRandomParaInfo *p, size_t n, uint8_t out[8]) {
  if (p->isAddr != 1) return ACL_SUCCESS;
  uint64_t a;
  memcpy(&a, p->valueOrAddr, sizeof a);
  dev_read d = {(const void *)(uintptr_t)a, n, out};
  return aipc__mem_run_on_device(call, (void *)(uintptr_t)a, n, NULL, 0, read_bytes, &d);
}

static aclError run_random(aipc__task *t, aclError failed, const atomic_bool *cancel) {
  (void)failed;
  (void)cancel;
  random_task *r = (random_task *)t;
  const aclrtRandomNumTaskInfo *in = &r->info;
  const aclrtRandomNumFuncParaInfo *f = &in->randomNumFuncParaInfo;
  const char *call = "aclrtRandomNumAsync (running on the stream)";
  random_run g = {in, {0}, {0}, r->seed, r->num};
  memcpy(g.a, r->a, 8);
  memcpy(g.b, r->b, 8);
  size_t es = random_elem(in->dataType);
  uint8_t seed[8] = {0}, num[8] = {0};
  aclError rc;
  if ((rc = read_para(call, &f->paramInfo.uniformDisInfo.min, es, g.a)) ||
      (f->funcType != ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK &&
       (rc = read_para(call, &f->paramInfo.uniformDisInfo.max, es, g.b))) ||
      (rc = read_para(call, &in->randomSeed, 8, seed)) || (rc = read_para(call, &in->randomNum, 8, num)))
    return rc;
  if (in->randomSeed.isAddr == 1) memcpy(&g.seed, seed, 8);
  if (in->randomNum.isAddr == 1) memcpy(&g.num, num, 8);
  if (g.num > (uint64_t)SIZE_MAX / 8)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: randomNum %llu is too large", call, (unsigned long long)g.num);
  return aipc__mem_run_on_device(call, in->randomResultAddr, result_bytes(in, g.num), in->randomCounterAddr,
                                 sizeof(uint64_t), generate, &g);
}

aclError aipc__emu_random_num_async(const aclrtRandomNumTaskInfo *taskInfo, const aclrtStream stream, void *reserve) {
  const char *call = AIPC_CALL_NAME(random_num_async);
  if (!taskInfo) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: taskInfo is NULL", call);
  if (reserve) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: reserve must be NULL", call);
  const aclrtRandomNumTaskInfo *in = taskInfo;
  const aclrtRandomNumFuncParaInfo *f = &in->randomNumFuncParaInfo;
  size_t es = random_elem(in->dataType);
  if (!es)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: dataType %d is not ACL_INT32, _INT64, _UINT32, _UINT64, _BF16, _FLOAT16 or _FLOAT", call,
                      (int)in->dataType);
  if ((unsigned)f->funcType > ACL_RT_RANDOM_NUM_FUNC_TYPE_TRUNCATED_NORMAL_DIS)
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: funcType %d is not an aclrtRandomNumFuncType (0..3)", call,
                      (int)f->funcType);
  bool dropout = f->funcType == ACL_RT_RANDOM_NUM_FUNC_TYPE_DROPOUT_BITMASK;
  bool uniform = f->funcType == ACL_RT_RANDOM_NUM_FUNC_TYPE_UNIFORM_DIS;
  if (!uniform && !is_float(in->dataType))
    return aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: %s takes a floating-point dataType (ACL_FLOAT, _FLOAT16, _BF16), not %d", call,
                      dropout ? "the dropout bitmask" : "a normal distribution", (int)in->dataType);
  if (!in->randomResultAddr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: randomResultAddr is NULL", call);
  if (!in->randomCounterAddr) return aipc__fail(ACL_ERROR_INVALID_PARAM, "%s: randomCounterAddr is NULL", call);
  random_task *r = calloc(1, sizeof *r);
  if (!r) return aipc__fail(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", call);
  r->info = *in;
  aclError rc;
  uint8_t seed[8], num[8];
  const char *na = dropout ? "dropoutRation" : uniform ? "min" : "mean", *nb = uniform ? "max" : "stddev";
  if ((rc = para_bytes(call, na, &f->paramInfo.uniformDisInfo.min, es, r->a)) ||
      (!dropout && (rc = para_bytes(call, nb, &f->paramInfo.uniformDisInfo.max, es, r->b))) ||
      (rc = para_bytes(call, "randomSeed", &in->randomSeed, 8, seed)) ||
      (rc = para_bytes(call, "randomNum", &in->randomNum, 8, num)))
    goto fail;
  memcpy(&r->seed, seed, 8);
  memcpy(&r->num, num, 8);
  if (r->num > (uint64_t)SIZE_MAX / 8) {
    rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID, "%s: randomNum %llu is too large", call, (unsigned long long)r->num);
    goto fail;
  }
  if (uniform && f->paramInfo.uniformDisInfo.min.isAddr == 0 && f->paramInfo.uniformDisInfo.max.isAddr == 0) {
    bool bad;
    if (is_float(in->dataType)) {
      bad = !(para_value(in->dataType, r->a) <= para_value(in->dataType, r->b));
    } else if (in->dataType == ACL_INT32 || in->dataType == ACL_INT64) {
      int64_t lo, hi;
      int32_t l32, h32;
      if (es == 8) {
        memcpy(&lo, r->a, 8);
        memcpy(&hi, r->b, 8);
      } else {
        memcpy(&l32, r->a, 4);
        memcpy(&h32, r->b, 4);
        lo = l32;
        hi = h32;
      }
      bad = !(lo < hi);
    } else {
      uint64_t lo = 0, hi = 0;
      memcpy(&lo, r->a, es);
      memcpy(&hi, r->b, es);
      bad = !(lo < hi);
    }
    if (bad) {
      rc = aipc__fail(ACL_ERROR_RT_PARAM_INVALID,
                      "%s: the uniform distribution's min is above its max (integers draw from [min, max), so min "
                      "must be below it)",
                      call);
      goto fail;
    }
  }
  int32_t dev;
  if ((rc = aipc__stream_device(call, stream, &dev))) goto fail;
  if (in->randomNum.isAddr == 0 &&
      (rc = aipc__mem_run_on_device(call, in->randomResultAddr, result_bytes(in, r->num), in->randomCounterAddr,
                                    sizeof(uint64_t), NULL, NULL)))
    goto fail;
  /* Where CANN would keep the parameters; the emulator keeps them in the task. */
  if (in->randomParaAddr && (rc = aipc__mem_run_on_device(call, in->randomParaAddr, 1, NULL, 0, NULL, NULL))) goto fail;
  r->t = (aipc__task){NULL, run_random, free_plain, NULL};
  return aipc__stream_submit(call, stream, &r->t);
fail:
  free(r);
  return rc;
}
