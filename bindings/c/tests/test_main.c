/* SPDX-License-Identifier: MIT */
/*
 * The C test runner's other half: `test_socketkit NAME` runs one test in this process;
 * `test_socketkit --list` prints every name. run_tests.py starts each test in a process of
 * its own, with a timeout, under valgrind or sanitizers.
 */
#include "test_support.h"
#include "test_list.h"

#define DECLARE(name) void test_##name(void);
TEST_LIST(DECLARE)

typedef struct {
    const char *name;
    void (*function)(void);
} test_entry_t;

#define ENTRY(name) {#name, test_##name},
static const test_entry_t tests[] = {TEST_LIST(ENTRY)};

int main(int argc, char **argv) {
    size_t count = sizeof tests / sizeof tests[0];
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < count; i++) printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s --list | TEST\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < count; i++) {
        if (strcmp(argv[1], tests[i].name) == 0) {
            tests[i].function();
            return 0;
        }
    }
    fprintf(stderr, "no test named %s\n", argv[1]);
    return 2;
}
