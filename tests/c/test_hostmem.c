/* Managed memory, registered host memory and external allocators: CANN's
 * rules and codes for each call, threads, fork and aclFinalize. Each test
 * runs in its own process (harness.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "acl/acl_rt_allocator.h"
#include "harness.h"

#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

static void *pages(size_t n) {
  void *p = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  return p;
}

/* ---- managed memory --------------------------------------------------------- */

TEST(managed_memory_is_reached_from_host_and_device) {
  unsigned char *m = NULL;
  CHECK_MSG(aclrtMemAllocManaged(NULL, 64, ACL_RT_MEM_ATTACH_GLOBAL), ACL_ERROR_INVALID_PARAM, "ptr is NULL");
  CHECK_MSG(aclrtMemAllocManaged((void **)&m, 64, 0), ACL_ERROR_INVALID_PARAM, "ACL_RT_MEM_ATTACH_GLOBAL");
  CHECK_MSG(aclrtMemAllocManaged((void **)&m, 64, 2), ACL_ERROR_INVALID_PARAM, "ACL_RT_MEM_ATTACH_GLOBAL");
  CHECK_MSG(aclrtMemAllocManaged((void **)&m, 0, ACL_RT_MEM_ATTACH_GLOBAL), ACL_ERROR_RT_PARAM_INVALID, "size is 0");
  CHECK(m == NULL);
  CHECK_OK(aclrtMemAllocManaged((void **)&m, 100, ACL_RT_MEM_ATTACH_GLOBAL));
  /* the host writes it directly; 2 MiB granules (CANN rounds the size up) */
  memset(m, 7, 2 * MiB);
  size_t freeb = 0, total = 0;
  CHECK_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeb, &total));
  CHECK(total - freeb >= 2 * MiB);
  /* device memory for copies and memsets */
  unsigned char h[16];
  CHECK_OK(aclrtMemcpy(h, sizeof h, m + 2 * MiB - 16, 16, ACL_MEMCPY_DEVICE_TO_HOST));
  CHECK(h[0] == 7 && h[15] == 7);
  CHECK_OK(aclrtMemset(m, 2 * MiB, 1, 2 * MiB));
  CHECK(m[2 * MiB - 1] == 1);
  void *d = NULL;
  CHECK_OK(aclrtMalloc(&d, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_OK(aclrtMemcpy(d, 4096, m, 4096, ACL_MEMCPY_DEVICE_TO_DEVICE));
  CHECK_OK(aclrtFree(d));
  /* released with aclrtFree, as CANN documents */
  CHECK_ACL(aclrtFreeHost(m), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtFree(m));
  CHECK_ACL(aclrtFree(m), ACL_ERROR_RT_INVALID_HANDLE);
  CHECK_OK(aclFinalize());
}

TEST(managed_memory_over_capacity) {
  setenv("ASCEND_IPC_EMU_MEMORY", "4M", 1);
  void *a = NULL, *b = NULL;
  CHECK_OK(aclrtMemAllocManaged(&a, 3 * MiB, ACL_RT_MEM_ATTACH_GLOBAL)); /* 4 MiB: two granules */
  CHECK_MSG(aclrtMemAllocManaged(&b, 1, ACL_RT_MEM_ATTACH_GLOBAL), ACL_ERROR_RT_MEMORY_ALLOCATION,
            "aclrtMemAllocManaged");
  CHECK_OK(aclrtFree(a));
  CHECK_OK(aclrtMemAllocManaged(&b, 1, ACL_RT_MEM_ATTACH_GLOBAL));
  CHECK_OK(aclFinalize()); /* releases b */
  CHECK_ACL(aclrtFree(b), ACL_ERROR_RT_INVALID_HANDLE);
}

/* ---- registered host memory ------------------------------------------------ */

TEST(host_register_rules) {
  unsigned char *p = pages(4);
  void *dev = NULL;
  CHECK_MSG(aclrtHostRegisterV2(NULL, PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_MSG(aclrtHostRegisterV2(p, 0, ACL_HOST_REG_MAPPED), ACL_ERROR_INVALID_PARAM, "size is 0");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, 0), ACL_ERROR_RT_PARAM_INVALID, "flag");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, 0x1), ACL_ERROR_RT_PARAM_INVALID, "flag");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_MAPPED | 0x100), ACL_ERROR_RT_PARAM_INVALID, "flag");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_IOMEMORY), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "I/O space");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_READONLY), ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "reserved");
  CHECK_MSG(aclrtHostRegisterV2(p + 8, PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_RT_PARAM_INVALID, "4 KiB");
  CHECK_MSG(aclrtHostRegisterV2(p, UINT64_MAX, ACL_HOST_REG_MAPPED), ACL_ERROR_RT_PARAM_INVALID, "wraps");
  unsigned char *half = pages(8); /* its second half unmapped */
  munmap(half + 4 * PAGE, 4 * PAGE);
  CHECK_MSG(aclrtHostRegisterV2(half, 8 * PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_RT_PARAM_INVALID, "not all mapped");
  CHECK_MSG(aclrtHostRegisterV2(half + 4 * PAGE, PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_RT_PARAM_INVALID,
            "not all mapped");
  munmap(half, 4 * PAGE);
  void *d = NULL;
  CHECK_OK(aclrtMalloc(&d, PAGE, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_MSG(aclrtHostRegisterV2(d, PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_RT_PARAM_INVALID, "device memory");
  CHECK_OK(aclrtFree(d));

  CHECK_OK(aclrtHostRegisterV2(p, 2 * PAGE, ACL_HOST_REG_MAPPED | ACL_HOST_REG_PINNED));
  CHECK_MSG(aclrtHostRegisterV2(p + PAGE, PAGE, ACL_HOST_REG_MAPPED), ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            "overlaps");
  CHECK_MSG(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_PINNED), ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "overlaps");
  CHECK_OK(aclrtHostRegisterV2(p + 2 * PAGE, PAGE, ACL_HOST_REG_PINNED)); /* side by side */

  CHECK_ACL(aclrtHostGetDevicePointer(NULL, &dev, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtHostGetDevicePointer(p, NULL, 0), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtHostGetDevicePointer(p, &dev, 1), ACL_ERROR_INVALID_PARAM, "reserved");
  CHECK_MSG(aclrtHostGetDevicePointer(p + PAGE, &dev, 0), ACL_ERROR_RT_PARAM_INVALID, "base");
  CHECK_MSG(aclrtHostGetDevicePointer(p + 2 * PAGE, &dev, 0), ACL_ERROR_RT_PARAM_INVALID, "ACL_HOST_REG_MAPPED");
  CHECK(dev == NULL);
  CHECK_OK(aclrtHostGetDevicePointer(p, &dev, 0));
  CHECK(dev != NULL);
  ((unsigned char *)dev)[5] = 42; /* what device code writes, the host reads: zero copy */
  CHECK_EQ(p[5], 42);

  CHECK_ACL(aclrtHostUnregister(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtHostUnregister(p + PAGE), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED, "not the base");
  CHECK_OK(aclrtHostUnregister(p));
  CHECK_ACL(aclrtHostUnregister(p), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK_ACL(aclrtHostGetDevicePointer(p, &dev, 0), ACL_ERROR_RT_PARAM_INVALID);
  CHECK_OK(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_MAPPED)); /* free again */
  CHECK_OK(aclrtHostUnregister(p));
  CHECK_OK(aclrtHostUnregister(p + 2 * PAGE));
  munmap(p, 4 * PAGE);
  CHECK_OK(aclFinalize());
}

TEST(host_register_of_malloc_host_memory) {
  void *h = NULL, *dev = NULL;
  CHECK_OK(aclrtMallocHost(&h, 8192));
  CHECK_MSG(aclrtHostRegisterV2(h, 8192, ACL_HOST_REG_PINNED), ACL_ERROR_RT_PARAM_INVALID, "page-locked already");
  CHECK_OK(aclrtHostRegisterV2(h, 8192, ACL_HOST_REG_MAPPED)); /* the sample's way */
  CHECK_OK(aclrtHostGetDevicePointer(h, &dev, 0));
  memset(dev, 3, 8192);
  CHECK_EQ(((unsigned char *)h)[8191], 3);
  CHECK_OK(aclrtHostUnregister(h));
  CHECK_OK(aclrtFreeHost(h));
  CHECK_OK(aclFinalize());
}

typedef struct reg_arg {
  unsigned char *base;
  int failures;
} reg_arg;

static void *register_loop(void *p) {
  reg_arg *a = p;
  for (int i = 0; i < 500; i++) {
    void *dev = NULL;
    aclError rc = aclrtHostRegisterV2(a->base, PAGE, ACL_HOST_REG_MAPPED);
    if (rc == ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED) continue; /* the main thread holds the whole range */
    if (rc || aclrtHostGetDevicePointer(a->base, &dev, 0) || dev != a->base || aclrtHostUnregister(a->base))
      a->failures++;
  }
  return NULL;
}

TEST(host_register_from_threads) {
  enum { T = 8 };
  unsigned char *p = pages(T);
  pthread_t th[T];
  reg_arg a[T];
  for (int i = 0; i < T; i++) {
    a[i] = (reg_arg){p + (size_t)i * PAGE, 0};
    CHECK(pthread_create(&th[i], NULL, register_loop, &a[i]) == 0);
  }
  /* one range they all overlap: refused while any of them holds its page */
  for (int i = 0; i < 200; i++) {
    aclError rc = aclrtHostRegisterV2(p, T * PAGE, ACL_HOST_REG_MAPPED);
    if (rc == ACL_SUCCESS)
      CHECK_OK(aclrtHostUnregister(p));
    else
      CHECK_EQ(rc, ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  }
  for (int i = 0; i < T; i++) {
    CHECK(pthread_join(th[i], NULL) == 0);
    CHECK_EQ(a[i].failures, 0);
  }
  munmap(p, T * PAGE);
  CHECK_OK(aclFinalize());
}

static int registered_child(void *p) {
  /* the child starts with nothing registered */
  CHECK_ACL(aclrtHostUnregister(p), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK_OK(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_MAPPED));
  CHECK_OK(aclrtHostUnregister(p));
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(host_register_fork_and_finalize) {
  unsigned char *p = pages(1);
  CHECK_OK(aclrtHostRegisterV2(p, PAGE, ACL_HOST_REG_MAPPED));
  CHECK_EQ(th_wait(th_spawn(registered_child, p)), 0);
  void *dev;
  CHECK_OK(aclrtHostGetDevicePointer(p, &dev, 0)); /* the parent's is untouched */
  CHECK_OK(aclFinalize());
  CHECK_ACL(aclrtHostUnregister(p), ACL_ERROR_HOST_MEMORY_NOT_REGISTERED); /* aclFinalize ended it */
  munmap(p, PAGE);
}

/* ---- external allocators ------------------------------------------------------- */

typedef struct my_alloc {
  int allocs, frees;
} my_alloc;

static void *my_alloc_fn(aclrtAllocator a, size_t size) {
  ((my_alloc *)a)->allocs++;
  return malloc(size);
}
static void my_free_fn(aclrtAllocator a, aclrtAllocatorBlock b) {
  ((my_alloc *)a)->frees++;
  free(b);
}
static void *my_advise_fn(aclrtAllocator a, size_t size, aclrtAllocatorAddr addr) {
  (void)addr;
  return my_alloc_fn(a, size);
}
static void *my_addr_fn(aclrtAllocatorBlock b) { return b; }

TEST(allocator_rules) {
  my_alloc st = {0, 0};
  aclrtStream s = NULL, s2 = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtCreateStream(&s2));
  aclrtAllocatorDesc d = aclrtAllocatorCreateDesc();
  CHECK(d != NULL);
  CHECK_ACL(aclrtAllocatorSetObjToDesc(NULL, &st), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorSetObjToDesc(&st, &st), ACL_ERROR_INVALID_PARAM); /* not a description */
  CHECK_MSG(aclrtAllocatorSetObjToDesc(d, NULL), ACL_ERROR_INVALID_PARAM, "allocator is NULL");
  CHECK_ACL(aclrtAllocatorSetAllocFuncToDesc(d, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorSetFreeFuncToDesc(d, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorSetAllocAdviseFuncToDesc(d, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, NULL), ACL_ERROR_INVALID_PARAM);
  /* incomplete: CANN needs the object, alloc, free and get-address */
  CHECK_MSG(aclrtAllocatorRegister(s, d), ACL_ERROR_INVALID_PARAM, "obj");
  CHECK_OK(aclrtAllocatorSetObjToDesc(d, &st));
  CHECK_MSG(aclrtAllocatorRegister(s, d), ACL_ERROR_INVALID_PARAM, "allocFunc");
  CHECK_OK(aclrtAllocatorSetAllocFuncToDesc(d, my_alloc_fn));
  CHECK_MSG(aclrtAllocatorRegister(s, d), ACL_ERROR_INVALID_PARAM, "freeFunc");
  CHECK_OK(aclrtAllocatorSetFreeFuncToDesc(d, my_free_fn));
  CHECK_MSG(aclrtAllocatorRegister(s, d), ACL_ERROR_INVALID_PARAM, "getAddrFromBlockFunc");
  CHECK_OK(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, my_addr_fn));
  CHECK_MSG(aclrtAllocatorRegister(NULL, d), ACL_ERROR_INVALID_PARAM, "stream is NULL");
  CHECK_ACL(aclrtAllocatorRegister(&st, d), ACL_ERROR_INVALID_PARAM); /* not a stream */
  CHECK_ACL(aclrtAllocatorRegister(s, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtAllocatorRegister(s, d)); /* advise is optional */

  aclrtAllocatorDesc got = NULL;
  aclrtAllocator obj = NULL;
  aclrtAllocatorAllocFunc af = NULL;
  aclrtAllocatorFreeFunc ff = NULL;
  aclrtAllocatorAllocAdviseFunc adv = my_advise_fn;
  aclrtAllocatorGetAddrFromBlockFunc gf = NULL;
  CHECK_ACL(aclrtAllocatorGetByStream(s, NULL, &obj, &af, &ff, &adv, &gf), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorGetByStream(NULL, &got, &obj, &af, &ff, &adv, &gf), ACL_ERROR_INVALID_PARAM);
  CHECK_MSG(aclrtAllocatorGetByStream(s2, &got, &obj, &af, &ff, &adv, &gf), ACL_ERROR_INVALID_PARAM,
            "not registered");
  CHECK_OK(aclrtAllocatorGetByStream(s, &got, &obj, &af, &ff, &adv, &gf));
  CHECK(got == d && obj == &st && af == my_alloc_fn && ff == my_free_fn && adv == NULL && gf == my_addr_fn);
  CHECK_OK(aclrtAllocatorGetByStream(s, &got, NULL, NULL, NULL, NULL, NULL)); /* the rest optional */
  aclrtAllocatorBlock b = af(obj, 256);
  CHECK(gf(b) == b);
  ff(obj, b);
  CHECK(st.allocs == 1 && st.frees == 1);

  /* a copy is registered: later changes and the description's end do not reach it */
  CHECK_OK(aclrtAllocatorSetAllocAdviseFuncToDesc(d, my_advise_fn));
  CHECK_OK(aclrtAllocatorGetByStream(s, &got, &obj, &af, &ff, &adv, &gf));
  CHECK(adv == NULL);
  CHECK_OK(aclrtAllocatorRegister(s2, d));
  CHECK_OK(aclrtAllocatorGetByStream(s2, &got, &obj, &af, &ff, &adv, &gf));
  CHECK(adv == my_advise_fn);
  CHECK_OK(aclrtAllocatorDestroyDesc(d));
  CHECK_ACL(aclrtAllocatorDestroyDesc(d), ACL_ERROR_INVALID_PARAM);
  CHECK_ACL(aclrtAllocatorSetObjToDesc(d, &st), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtAllocatorGetByStream(s2, &got, &obj, &af, &ff, &adv, &gf));
  CHECK(got == d && adv == my_advise_fn);

  CHECK_ACL(aclrtAllocatorUnregister(NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtAllocatorUnregister(s));
  CHECK_OK(aclrtAllocatorUnregister(s)); /* none registered: no error, as in CANN */
  CHECK_ACL(aclrtAllocatorGetByStream(s, &got, &obj, &af, &ff, &adv, &gf), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclrtDestroyStream(s2));
  CHECK_OK(aclFinalize());
}

static void *desc_loop(void *p) {
  aclrtStream s = p;
  for (int i = 0; i < 300; i++) {
    aclrtAllocatorDesc d = aclrtAllocatorCreateDesc();
    aclrtAllocatorDesc got = NULL;
    if (!d || aclrtAllocatorSetObjToDesc(d, d) || aclrtAllocatorSetAllocFuncToDesc(d, my_alloc_fn) ||
        aclrtAllocatorSetFreeFuncToDesc(d, my_free_fn) || aclrtAllocatorSetGetAddrFromBlockFuncToDesc(d, my_addr_fn) ||
        aclrtAllocatorRegister(s, d) || aclrtAllocatorGetByStream(s, &got, NULL, NULL, NULL, NULL, NULL) ||
        aclrtAllocatorDestroyDesc(d))
      return (void *)1;
  }
  return NULL;
}

TEST(allocator_threads_fork_and_finalize) {
  enum { T = 6 };
  aclrtStream s[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) CHECK_OK(aclrtCreateStream(&s[i]));
  for (int i = 0; i < T; i++) CHECK(pthread_create(&th[i], NULL, desc_loop, s[i]) == 0);
  for (int i = 0; i < T; i++) {
    void *r;
    CHECK(pthread_join(th[i], &r) == 0);
    CHECK(r == NULL);
  }
  aclrtAllocatorDesc got;
  CHECK_OK(aclrtAllocatorGetByStream(s[0], &got, NULL, NULL, NULL, NULL, NULL));
  aclrtAllocatorDesc keep = aclrtAllocatorCreateDesc();
  CHECK(keep != NULL);
  CHECK_EQ(th_wait(th_spawn(registered_child, pages(1))), 0);
  CHECK_OK(aclFinalize()); /* ends descriptions and registrations */
  CHECK_ACL(aclrtAllocatorDestroyDesc(keep), ACL_ERROR_INVALID_PARAM);
  aclrtStream again;
  CHECK_OK(aclrtCreateStream(&again));
  CHECK_ACL(aclrtAllocatorGetByStream(s[0], &got, NULL, NULL, NULL, NULL, NULL), ACL_ERROR_INVALID_PARAM);
  CHECK_OK(aclFinalize());
}

static int allocator_child(void *p) {
  aclrtAllocatorDesc d = p;
  CHECK_ACL(aclrtAllocatorDestroyDesc(d), ACL_ERROR_INVALID_PARAM); /* the parent's */
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(allocator_fork_child_starts_clean) {
  aclrtAllocatorDesc d = aclrtAllocatorCreateDesc();
  CHECK(d != NULL);
  CHECK_EQ(th_wait(th_spawn(allocator_child, d)), 0);
  CHECK_OK(aclrtAllocatorDestroyDesc(d));
  CHECK_OK(aclFinalize());
}

/* CANN sets host memory from aclrtMallocHost too, told apart by the address
 * (aclrtMemset and aclrtMemsetAsync alike); other host memory is refused. */
TEST(memset_async_on_malloc_host_memory) {
  unsigned char *h = NULL, mine[64];
  aclrtStream s = NULL;
  CHECK_OK(aclrtCreateStream(&s));
  CHECK_OK(aclrtMallocHost((void **)&h, 3 * PAGE));
  CHECK_OK(aclrtMemsetAsync(h + PAGE, 2 * PAGE, 0x6b, 2 * PAGE, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK(h[PAGE] == 0x6b && h[3 * PAGE - 1] == 0x6b);
  CHECK_MSG(aclrtMemsetAsync(h + PAGE, 3 * PAGE, 0, 3 * PAGE, s), ACL_ERROR_INVALID_PARAM, "overruns");
  CHECK_MSG(aclrtMemsetAsync(mine, sizeof mine, 0, sizeof mine, s), ACL_ERROR_INVALID_PARAM, "did not allocate");
  /* CANN: a zero-byte memset succeeds before any check */
  CHECK_OK(aclrtMemset(NULL, 0, 0, 0));
  CHECK_OK(aclrtMemsetAsync(NULL, 0, 0, 0, &mine));
  CHECK_MSG(aclrtMemsetAsync(NULL, 1, 0, 1, s), ACL_ERROR_INVALID_PARAM, "NULL");
  CHECK_OK(aclrtMemsetAsync(h, PAGE, 1, PAGE, s));
  CHECK_OK(aclrtSynchronizeStream(s));
  CHECK_OK(aclrtFreeHost(h));
  CHECK_MSG(aclrtMemset(h, PAGE, 0, PAGE), ACL_ERROR_INVALID_PARAM, "not writable"); /* unmapped by the free */
  CHECK_OK(aclrtDestroyStream(s));
  CHECK_OK(aclFinalize());
}
