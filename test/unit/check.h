/*
 * check.h — the C tests' CHECK: a failed check prints "file:line: check
 * failed: <condition>" and counts in checks_failed, which run_tests compares
 * before and after each case.
 */
#ifndef HWT_TEST_CHECK_H
#define HWT_TEST_CHECK_H

#include <stddef.h>
#include <stdio.h>

static int checks_failed;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      checks_failed++;                                                \
    }                                                                 \
  } while (0)

/* A test file's cases, run in order by run_tests. */
typedef struct test_case {
  const char *name;
  void (*run)(void);
} test_case;

/* Runs the cases and prints "<suite>: N passed, N failed"; the exit code. */
static int run_tests(const char *suite, const test_case *tests, size_t count) {
  int passed = 0, failed = 0;
  for (size_t i = 0; i < count; i++) {
    int before = checks_failed;
    tests[i].run();
    if (checks_failed == before) passed++;
    else { failed++; fprintf(stderr, "FAILED: %s\n", tests[i].name); }
  }
  printf("%s: %d passed, %d failed\n", suite, passed, failed);
  return failed ? 1 : 0;
}

#endif
