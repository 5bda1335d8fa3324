/* Shared by the fuzz targets: a check that holds in release builds too. */
#ifndef ASCEND_IPC_FUZZ_COMMON_H_
#define ASCEND_IPC_FUZZ_COMMON_H_

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

#endif
