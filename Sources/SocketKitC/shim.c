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

int skc_recv_datagrams(int fd, struct msghdr *headers, unsigned int *lengths, unsigned int count) {
    struct mmsghdr messages[SKC_MAX_DATAGRAM_BATCH];
    if (count > SKC_MAX_DATAGRAM_BATCH) count = SKC_MAX_DATAGRAM_BATCH;
    for (unsigned int i = 0; i < count; i++) {
        messages[i].msg_hdr = headers[i];
        messages[i].msg_len = 0;
    }
    int received = recvmmsg(fd, messages, count, MSG_DONTWAIT, NULL);
    for (int i = 0; i < received; i++) {
        headers[i] = messages[i].msg_hdr; /* msg_flags and msg_namelen come back */
        lengths[i] = messages[i].msg_len;
    }
    return received;
}

int skc_send_datagrams(int fd, struct msghdr *headers, unsigned int *lengths, unsigned int count) {
    struct mmsghdr messages[SKC_MAX_DATAGRAM_BATCH];
    if (count > SKC_MAX_DATAGRAM_BATCH) count = SKC_MAX_DATAGRAM_BATCH;
    for (unsigned int i = 0; i < count; i++) {
        messages[i].msg_hdr = headers[i];
        messages[i].msg_len = 0;
    }
    int sent = sendmmsg(fd, messages, count, MSG_NOSIGNAL | MSG_DONTWAIT);
    for (int i = 0; i < sent; i++) lengths[i] = messages[i].msg_len;
    return sent;
}
