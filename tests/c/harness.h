/*
 * A small test harness: TEST(name) { ... } registers a test; the runner
 * (harness.c) runs each test in its own forked process with a timeout, so a
 * crash, hang or leak in one test cannot hide behind another.
 *
 *   ./test_x            run every test
 *   ./test_x -l         list tests
 *   ./test_x a b        run tests a and b
 * TEST_TIMEOUT (seconds, default 60) bounds each test.
 */
#ifndef ASCEND_IPC_TEST_HARNESS_H_
#define ASCEND_IPC_TEST_HARNESS_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"

typedef void (*th_fn)(void);
void th_register(const char *name, th_fn fn);
void th_fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

#define TEST(name)                                                          \
  static void test_##name(void);                                            \
  __attribute__((constructor)) static void th_reg_##name(void) {            \
    th_register(#name, test_##name);                                        \
  }                                                                         \
  static void test_##name(void)

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) th_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);           \
  } while (0)

#define CHECK_EQ(a, b)                                                      \
  do {                                                                      \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);               \
    if (th_a_ != th_b_)                                                     \
      th_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, th_a_, th_b_); \
  } while (0)

/* The call returns `code`; a failing call must also leave a message. */
#define CHECK_ACL(call, code) th_check_acl(__FILE__, __LINE__, #call, (call), (code), NULL)
#define CHECK_OK(call) CHECK_ACL(call, ACL_SUCCESS)
/* The call fails with `code` and its message contains needle. */
#define CHECK_MSG(call, code, needle) th_check_acl(__FILE__, __LINE__, #call, (call), (code), (needle))
/* What the two check: got is what `call` returned; the message is taken here. */
void th_check_acl(const char *file, int line, const char *call, aclError got, aclError want, const char *needle);

/* Seconds until the harness's time limit (TEST_TIMEOUT) ends the running
 * test. A wait for something that must happen eventually (a server thread
 * seeing an EOF) may use most of it: only a "never" runs out of it, however
 * slow or loaded the machine. */
double th_seconds_left(void);

/* Helpers for multi-process tests. */

/* Forks; the child runs fn(arg) and exits with its return value. Returns the pid. */
int th_spawn(int (*fn)(void *), void *arg);
/* Waits for pid; returns its exit status, or 128+signal. Fails the test on timeout. */
int th_wait(int pid);
/* A pipe pair for parent/child messages: write all / read exactly n bytes (fails on EOF). */
void th_write(int fd, const void *buf, size_t n);
void th_read(int fd, void *buf, size_t n);

#endif
