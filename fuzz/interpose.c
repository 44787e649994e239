/* SPDX-License-Identifier: MIT */
/*
 * interpose.c - the C API fuzzer's descriptor oracle: close(), write() and the send family,
 * shutdown() and dup2()/dup3() are interposed (definitions in the executable come before
 * glibc's), and any of them aimed at a descriptor the harness owns (a "canary"), from
 * anywhere but the harness's own I/O, fails the run. The instrumented library is built with
 * -DSOCKETKIT_NO_DIRECT_SYSCALLS, so its sends and reads go through these names too.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "interpose.h"

#define MAX_FD 65536
static atomic_uchar canaries[MAX_FD];
static _Thread_local int harness_io;

void interpose_set_canary(int fd, int on) {
    if (fd >= 0 && fd < MAX_FD) atomic_store(&canaries[fd], (unsigned char)(on ? 1 : 0));
}

int interpose_is_canary(int fd) {
    return fd >= 0 && fd < MAX_FD && atomic_load(&canaries[fd]);
}

void interpose_harness_begin(void) { harness_io++; }
void interpose_harness_end(void) { harness_io--; }

static void check(int fd, const char *what) {
    if (harness_io > 0 || !interpose_is_canary(fd)) return;
    char message[160];
    int length = snprintf(message, sizeof message,
                          "\n==FUZZ ORACLE== the library called %s on descriptor %d, which the harness owns\n", what, fd);
    /* Straight to the kernel: stderr's own write() comes through here too. */
    if (length > 0) syscall(SYS_write, 2, message, (size_t)length);
    abort();
}

#define NEXT(name) static __typeof__(name) *next_##name; if (!next_##name) next_##name = dlsym(RTLD_NEXT, #name)

/* A close of a descriptor that is not open: a second close of the same number, which
 * would have closed someone else's descriptor had the number been reused meanwhile. The
 * same for a write or send: one that found its number closed would have gone to whoever
 * reused it (26.3's wake-up after the loop closed its eventfd is caught here far more often
 * than by a canary that happened to take the number). */
static void check_result(int fd, const char *what, long result) {
    if (result != -1 || errno != EBADF || harness_io > 0) return;
    char message[160];
    int length = snprintf(message, sizeof message,
                          "\n==FUZZ ORACLE== the library called %s on descriptor %d, which was not open (EBADF)\n", what, fd);
    if (length > 0) syscall(SYS_write, 2, message, (size_t)length);
    abort();
}

int close(int fd) {
    NEXT(close);
    check(fd, "close");
    int result = next_close(fd);
    check_result(fd, "close", result);
    return result;
}

ssize_t write(int fd, const void *buffer, size_t count) {
    NEXT(write);
    check(fd, "write");
    ssize_t result = next_write(fd, buffer, count);
    check_result(fd, "write", result);
    return result;
}

ssize_t writev(int fd, const struct iovec *vector, int count) {
    NEXT(writev);
    check(fd, "writev");
    ssize_t result = next_writev(fd, vector, count);
    check_result(fd, "writev", result);
    return result;
}

ssize_t send(int fd, const void *buffer, size_t count, int flags) {
    NEXT(send);
    check(fd, "send");
    ssize_t result = next_send(fd, buffer, count, flags);
    check_result(fd, "send", result);
    return result;
}

ssize_t sendto(int fd, const void *buffer, size_t count, int flags, const struct sockaddr *to, socklen_t length) {
    NEXT(sendto);
    check(fd, "sendto");
    ssize_t result = next_sendto(fd, buffer, count, flags, to, length);
    check_result(fd, "sendto", result);
    return result;
}

ssize_t sendmsg(int fd, const struct msghdr *message, int flags) {
    NEXT(sendmsg);
    check(fd, "sendmsg");
    ssize_t result = next_sendmsg(fd, message, flags);
    check_result(fd, "sendmsg", result);
    return result;
}

int sendmmsg(int fd, struct mmsghdr *messages, unsigned int count, int flags) {
    NEXT(sendmmsg);
    check(fd, "sendmmsg");
    return next_sendmmsg(fd, messages, count, flags);
}

int shutdown(int fd, int how) {
    NEXT(shutdown);
    check(fd, "shutdown");
    return next_shutdown(fd, how);
}

int dup2(int old_fd, int new_fd) {
    NEXT(dup2);
    check(new_fd, "dup2 onto");
    return next_dup2(old_fd, new_fd);
}

int dup3(int old_fd, int new_fd, int flags) {
    NEXT(dup3);
    check(new_fd, "dup3 onto");
    return next_dup3(old_fd, new_fd, flags);
}
