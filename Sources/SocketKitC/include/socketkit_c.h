/*
 * SocketKitC: the few things Swift cannot reach directly from Glibc.
 *
 * Only shims live here, no logic: headers Glibc's module does not export
 * (epoll, eventfd, timerfd), GNU-only functions that need _GNU_SOURCE (which
 * must never be defined for the Swift importer, see BUILDING.md §9), and
 * macros that do not import.
 */
#ifndef SOCKETKIT_C_H
#define SOCKETKIT_C_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <net/if.h>
#include <ifaddrs.h>
#include <pthread.h>

/* The public C API's types (delegate struct, error struct, descriptors), so that the
 * @_cdecl implementations in Sources/SocketKit/CAPI use exactly what users compile
 * against. */
#include "../../../include/socketkit.h"

/* accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC. */
int skc_accept_nonblocking(int fd, struct sockaddr *address, socklen_t *length);

/* pthread_setname_np(3) for the calling thread (names are cut to 15 bytes). */
void skc_set_current_thread_name(const char *name);

/* The kernel thread id of the calling thread (gettid(2)). */
int skc_current_thread_id(void);

/* sizeof(((struct sockaddr_un *)0)->sun_path). */
static inline size_t skc_unix_path_capacity(void) {
    return sizeof(((struct sockaddr_un *)0)->sun_path);
}

/* FIONREAD is a plain integer on Linux, but keep the ioctl typed. */
static inline int skc_bytes_readable(int fd, int *count) {
    return ioctl(fd, FIONREAD, count);
}

/* recvmmsg(2) / sendmmsg(2) (GNU-only) over plain msghdr arrays: at most
 * SKC_MAX_DATAGRAM_BATCH headers; lengths[i] receives each message's byte count.
 * Return the number of messages handled, or -1 with errno. */
#define SKC_MAX_DATAGRAM_BATCH 64
int skc_recv_datagrams(int fd, struct msghdr *headers, unsigned int *lengths, unsigned int count);
int skc_send_datagrams(int fd, struct msghdr *headers, unsigned int *lengths, unsigned int count);

#endif
