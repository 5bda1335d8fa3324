/* The device binary of test_kernel: host kernels on the emulator's ABI
 * (ascend_ipc/kernel.h). */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ascend_ipc/kernel.h"

/* x[block] += 1, and the order blocks ran in. */
struct add_one_args {
  uint32_t *x;
  uint32_t *order; /* order[0]: how many ran; then their indices */
};
AIPC_KERNEL(add_one) {
  const struct add_one_args *a = ctx->args;
  a->x[ctx->block_idx] += 1;
  a->order[1 + a->order[0]++] = ctx->block_idx;
}

/* What block 0 saw of its context. */
struct ctx_seen {
  uint32_t abi, block_dim, arg_count;
  int32_t device;
  size_t args_size;
  size_t offsets[8];
};
struct record_args {
  struct ctx_seen *out;
  uint8_t b;
  uint16_t h;
  uint32_t w;
  uint64_t d;
  uint8_t tail[3];
};
AIPC_KERNEL(record_ctx) {
  const struct record_args *a = ctx->args;
  if (ctx->block_idx != 0) return;
  a->out->abi = ctx->abi;
  a->out->block_dim = ctx->block_dim;
  a->out->arg_count = ctx->arg_count;
  a->out->device = ctx->device;
  a->out->args_size = ctx->args_size;
  for (uint32_t i = 0; i < ctx->arg_count && i < 8; i++) a->out->offsets[i] = ctx->arg_offsets[i];
}

/* Marks ran[block]; block `at` faults with `code`. */
struct fault_args {
  uint32_t *ran;
  uint32_t at;
  int32_t code;
};
AIPC_KERNEL(fault_at) {
  const struct fault_args *a = ctx->args;
  a->ran[ctx->block_idx] = 1;
  if (ctx->block_idx == a->at) ctx->fault(ctx, a->code, "fault_at asked for it");
}

/* *out = *a + *b, a and b placeholders. */
struct sum_args {
  int32_t *out;
  const int32_t *a, *b;
};
AIPC_KERNEL(placeholder_sum) {
  const struct sum_args *s = ctx->args;
  *s->out = *s->a + *s->b;
}

/* Sleeps 30 ms, then stores 1 in *flag: work long enough to be seen out of order. */
AIPC_KERNEL(slow_flag) {
  uint32_t *flag = *(uint32_t *const *)ctx->args;
  struct timespec ts = {0, 30 * 1000000L};
  nanosleep(&ts, NULL);
  *flag = 1;
}

/* Not kernels: a plain symbol, and a descriptor of another ABI. */
__attribute__((visibility("default"))) int not_a_kernel = 1;
static void nothing(const aipc_kernel_ctx *ctx) { (void)ctx; }
__attribute__((visibility("default"))) const aipc_kernel_desc aipc_kernel__old_abi = {AIPC_KERNEL_MAGIC, 99, "old_abi",
                                                                                      nothing};

/* x[block] += 1 through the checked access; faults on memory that is not live. */
AIPC_KERNEL(checked_inc) {
  uint32_t *x = *(uint32_t *const *)ctx->args + ctx->block_idx, v;
  if (ctx->read(ctx, &v, x, sizeof v) != 0) return;
  v += 1;
  (void)ctx->write(ctx, x, &v, sizeof v);
}

/* Runs until its launch is cancelled (at most 60 s), then *flag = 1... which
 * it cannot do once cancelled: it only returns. */
AIPC_KERNEL(until_cancelled) {
  for (int i = 0; i < 60000 && !ctx->cancelled(ctx); i++) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
}
