#include "ipc_util.h"

static int child(chan *c, void *arg) {
  char key[KEYLEN];
  from_parent(c, key, KEYLEN);
  void *p = NULL;
  CHECK_OK(aclrtIpcMemImportByKey(&p, key, 0));
  CHECK(check_pattern(p, 64 * KiB, 7));
  fill_pattern(p, 64 * KiB, 8);
  CHECK_OK(aclrtIpcMemClose(key));
  int one = 1;
  to_parent(c, &one, sizeof one);
  CHECK_OK(aclFinalize());
  return 0;
}

TEST(smoke) {
  char key[KEYLEN];
  void *p = export_new(64 * KiB, EXPORT_ANY, key);
  fill_pattern(p, 64 * KiB, 7);
  chan c;
  chan_open(&c);
  int pid = chan_spawn(&c, child, NULL);
  to_child(&c, key, KEYLEN);
  int one;
  from_child(&c, &one, sizeof one);
  CHECK(check_pattern(p, 64 * KiB, 8));
  CHECK_EQ(th_wait(pid), 0);
  CHECK_OK(aclrtIpcMemClose(key));
  CHECK_OK(aclrtFree(p));
  CHECK_OK(aclFinalize());
}
