/* SPDX-License-Identifier: MIT */
/*
 * fuzz_support.h - what the fuzzers in this folder share: reading a libFuzzer input as a
 * stream of choices, failing with a message (abort: libFuzzer saves the input), waiting on a
 * condition with a deadline, and loopback TCP pairs made with plain system calls.
 *
 * Every fuzzer is a libFuzzer target (LLVMFuzzerTestOneInput) built with clang's
 * -fsanitize=fuzzer,address,undefined against an instrumented libsocketkit.so (AddressSanitizer
 * and SanitizerCoverage in the engine too; see README.md).
 */
#ifndef FUZZ_SUPPORT_H
#define FUZZ_SUPPORT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <socketkit.h>

/* ---- Failing --------------------------------------------------------------------------- */

/* Prints the message and aborts: libFuzzer reports it as a crash and writes the input. */
#define FZ_FAIL(...)                                                                         \
    do {                                                                                     \
        fprintf(stderr, "\n==FUZZ ORACLE== %s:%d: ", __FILE__, __LINE__);                    \
        fprintf(stderr, __VA_ARGS__);                                                        \
        fprintf(stderr, "\n");                                                               \
        fz_dump_context();                                                                   \
        abort();                                                                             \
    } while (0)

#define FZ_CHECK(condition, ...)                                                             \
    do {                                                                                     \
        if (!(condition)) {                                                                  \
            fprintf(stderr, "\n==FUZZ ORACLE== check failed: %s", #condition);               \
            FZ_FAIL(__VA_ARGS__);                                                            \
        }                                                                                    \
    } while (0)

/* A fuzzer may set a function that prints what it was doing (its op log) on failure. */
extern void (*fz_context_printer)(void);
void fz_dump_context(void);

/* ---- Reading an input as choices -------------------------------------------------------- */

typedef struct fz_input {
    const uint8_t *data;
    size_t size;
    size_t position;
} fz_input_t;

void fz_input_init(fz_input_t *input, const uint8_t *data, size_t size);
int fz_input_empty(const fz_input_t *input);
/* The next byte, or 0 once the input is used up (inputs end in a run of defaults). */
uint8_t fz_u8(fz_input_t *input);
uint16_t fz_u16(fz_input_t *input);
uint32_t fz_u32(fz_input_t *input);
/* A number in [low, high] (inclusive). */
size_t fz_range(fz_input_t *input, size_t low, size_t high);
/* A double from a small table of interesting values (0, negatives, NaN, infinities, tiny,
 * huge) or a byte-derived one. */
double fz_timeout(fz_input_t *input);
/* A size_t from a table of edges (0, 1, SIZE_MAX, SSIZE_MAX, 2^31...) or small numbers. */
size_t fz_size(fz_input_t *input);

/* ---- Time and waiting -------------------------------------------------------------------- */

double fz_now(void);
/* A condition variable on CLOCK_MONOTONIC. */
void fz_cond_init(pthread_cond_t *condition);
/* Waits on `condition` until `deadline` (fz_now() seconds); returns 0 once it passed. */
int fz_cond_wait_until(pthread_cond_t *condition, pthread_mutex_t *lock, double deadline);

/* ---- Peers ------------------------------------------------------------------------------- */

/* A connected TCP pair over 127.0.0.1, both blocking: *a is the connecting end, *b the
 * accepted one (a listener of the process, made once). Returns 0, or -1 (errno). */
int fz_tcp_pair(int *a, int *b);
/* A blocking connect to 127.0.0.1:port; 0 and the descriptor in *out, or -1 (errno). */
int fz_tcp_connect_to(uint16_t port, int *out);
/* Sends all of it (poll between partial sends) until `deadline`; returns the bytes sent
 * (fewer: the deadline passed or the peer went away). */
size_t fz_send_all(int fd, const void *data, size_t length, double deadline);
/* Waits until the kernel has no unsent or unacknowledged bytes of `fd` (SIOCOUTQ 0): over
 * loopback they are then in the peer's receive queue (or the connection was reset: nothing more
 * will go). 0 if the deadline passed first. */
int fz_wait_sent(int fd, double deadline);
/* Closes with a reset (SO_LINGER 0). */
void fz_close_with_reset(int fd);

/* cert.pem and key.pem of FUZZ_CERT_DIR (run.py makes them), each at most 511 bytes of path;
 * exits with a message naming `fuzzer` when it is not set. */
void fz_certificate_paths(const char *fuzzer, char cert[512], char key[512]);

/* The name of an error code, for messages. */
const char *fz_error_name(int code);

#endif
