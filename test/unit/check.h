/*
 * check.h — the C tests' CHECK: a failed check prints "file:line: check
 * failed: <condition>" and counts in checks_failed, which a test runner
 * compares before and after each case.
 */
#ifndef HWT_TEST_CHECK_H
#define HWT_TEST_CHECK_H

#include <stdio.h>

static int checks_failed;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      checks_failed++;                                                \
    }                                                                 \
  } while (0)

#endif
