#define _GNU_SOURCE 1
#include "socketkit_c.h"

#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

int skc_accept_nonblocking(int fd, struct sockaddr *address, socklen_t *length) {
    return accept4(fd, address, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

void skc_set_current_thread_name(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    pthread_setname_np(pthread_self(), truncated);
}

int skc_current_thread_id(void) {
    return (int)syscall(SYS_gettid);
}
