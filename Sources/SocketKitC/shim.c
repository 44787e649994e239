/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE 1
#include "socketkit_c.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <sys/sendfile.h>
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

int skc_available_cpus(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set);
}

_Static_assert(sizeof(skc_mmsghdr) == sizeof(struct mmsghdr), "skc_mmsghdr is struct mmsghdr");
_Static_assert(offsetof(skc_mmsghdr, msg_hdr) == offsetof(struct mmsghdr, msg_hdr), "skc_mmsghdr is struct mmsghdr");
_Static_assert(offsetof(skc_mmsghdr, msg_len) == offsetof(struct mmsghdr, msg_len), "skc_mmsghdr is struct mmsghdr");

/* Direct system calls unless SOCKETKIT_NO_DIRECT_SYSCALLS (see skc_read in the header). */
int skc_recv_datagrams(int fd, skc_mmsghdr *messages, unsigned int count) {
    if (count > SKC_MAX_DATAGRAM_BATCH) count = SKC_MAX_DATAGRAM_BATCH;
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return recvmmsg(fd, (struct mmsghdr *)messages, count, MSG_DONTWAIT, NULL);
#else
    return (int)syscall(SYS_recvmmsg, fd, messages, count, MSG_DONTWAIT, NULL);
#endif
}

int skc_send_datagrams(int fd, skc_mmsghdr *messages, unsigned int count) {
    if (count > SKC_MAX_DATAGRAM_BATCH) count = SKC_MAX_DATAGRAM_BATCH;
#ifdef SOCKETKIT_NO_DIRECT_SYSCALLS
    return sendmmsg(fd, (struct mmsghdr *)messages, count, MSG_NOSIGNAL | MSG_DONTWAIT);
#else
    return (int)syscall(SYS_sendmmsg, fd, messages, count, MSG_NOSIGNAL | MSG_DONTWAIT);
#endif
}

int skc_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *pid = credentials.pid;
    *uid = credentials.uid;
    *gid = credentials.gid;
    return 0;
}

ssize_t skc_read_with_descriptors(int fd, void *buffer, size_t count, int *fds, int *fd_count, int *truncated) {
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int) * SKC_MAX_PASSED_DESCRIPTORS)];
    } control;
    struct iovec vector = {buffer, count};
    struct msghdr message = {0};
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    *fd_count = 0;
    *truncated = 0;
    ssize_t result = recvmsg(fd, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (result < 0) return result;
    *truncated = (message.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t carried = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t index = 0; index < carried; index++) {
            int passed;
            memcpy(&passed, CMSG_DATA(header) + index * sizeof(int), sizeof passed);
            if (*fd_count < SKC_MAX_PASSED_DESCRIPTORS) {
                fds[(*fd_count)++] = passed;
            } else {
                close(passed);
                *truncated = 1;
            }
        }
    }
    return result;
}

ssize_t skc_send_with_descriptors(int fd, const struct iovec *vectors, int iovcnt, const int *fds, int fd_count) {
    if (fd_count < 1 || fd_count > SKC_MAX_PASSED_DESCRIPTORS) {
        errno = EINVAL;
        return -1;
    }
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int) * SKC_MAX_PASSED_DESCRIPTORS)];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {0};
    message.msg_iov = (struct iovec *)vectors;
    message.msg_iovlen = (size_t)iovcnt;
    message.msg_control = control.space;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)fd_count);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)fd_count);
    memcpy(CMSG_DATA(header), fds, sizeof(int) * (size_t)fd_count);
    return sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int skc_source_membership(int fd, int join, int level, unsigned interface, const struct sockaddr *group,
                          socklen_t group_length, const struct sockaddr *source, socklen_t source_length) {
    struct group_source_req request;
    memset(&request, 0, sizeof request);
    if (group_length > sizeof request.gsr_group || source_length > sizeof request.gsr_source) {
        errno = EINVAL;
        return -1;
    }
    request.gsr_interface = interface;
    memcpy(&request.gsr_group, group, group_length);
    memcpy(&request.gsr_source, source, source_length);
    return setsockopt(fd, level, join ? MCAST_JOIN_SOURCE_GROUP : MCAST_LEAVE_SOURCE_GROUP, &request, sizeof request);
}

int skc_set_packet_info(int fd, int family, int enabled) {
    int value = enabled ? 1 : 0;
    if (family == AF_INET) return setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &value, sizeof value);
    return setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &value, sizeof value);
}

int skc_packet_info(const struct msghdr *message, struct sockaddr_storage *destination, socklen_t *length,
                    unsigned *interface) {
    for (struct cmsghdr *control = CMSG_FIRSTHDR((struct msghdr *)message); control != NULL;
         control = CMSG_NXTHDR((struct msghdr *)message, control)) {
        if (control->cmsg_level == IPPROTO_IP && control->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo info;
            memcpy(&info, CMSG_DATA(control), sizeof info);
            struct sockaddr_in *address = (struct sockaddr_in *)destination;
            memset(address, 0, sizeof *address);
            address->sin_family = AF_INET;
            /* ipi_addr is the header's destination (a multicast group, a broadcast
             * address); ipi_spec_dst is the local address a reply would leave from. */
            address->sin_addr = info.ipi_addr;
            *length = sizeof *address;
            *interface = (unsigned)info.ipi_ifindex;
            return 1;
        }
        if (control->cmsg_level == IPPROTO_IPV6 && control->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            memcpy(&info, CMSG_DATA(control), sizeof info);
            struct sockaddr_in6 *address = (struct sockaddr_in6 *)destination;
            memset(address, 0, sizeof *address);
            address->sin6_family = AF_INET6;
            address->sin6_addr = info.ipi6_addr;
            if (IN6_IS_ADDR_LINKLOCAL(&info.ipi6_addr) || IN6_IS_ADDR_MC_LINKLOCAL(&info.ipi6_addr)) {
                address->sin6_scope_id = info.ipi6_ifindex;
            }
            *length = sizeof *address;
            *interface = info.ipi6_ifindex;
            return 1;
        }
    }
    return 0;
}

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h */
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

int skc_set_udp_segment(int fd, int size) {
    return setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &size, sizeof size);
}

int skc_set_udp_gro(int fd, int enabled) {
    int value = enabled ? 1 : 0;
    return setsockopt(fd, IPPROTO_UDP, UDP_GRO, &value, sizeof value);
}

int skc_coalesced_segment_size(const struct msghdr *message) {
    for (struct cmsghdr *control = CMSG_FIRSTHDR((struct msghdr *)message); control != NULL;
         control = CMSG_NXTHDR((struct msghdr *)message, control)) {
        if (control->cmsg_level == IPPROTO_UDP && control->cmsg_type == UDP_GRO) {
            int size;
            memcpy(&size, CMSG_DATA(control), sizeof size);
            return size > 0 ? size : 0;
        }
    }
    return 0;
}

ssize_t skc_sendfile(int fd, int file, int64_t offset, size_t count) {
    off_t position = (off_t)offset;
    return sendfile(fd, file, &position, count);
}

SKC_THREAD_LOCAL skc_callback_scope_t skc_callback_scope;
SKC_THREAD_LOCAL void *skc_event_sink;

static SKC_THREAD_LOCAL void (*thread_wait_hook)(void *context);
static SKC_THREAD_LOCAL void *thread_wait_hook_context;

void skc_set_thread_wait_hook(void (*hook)(void *context), void *context) {
    thread_wait_hook = hook;
    thread_wait_hook_context = context;
}

void skc_thread_will_wait(void) {
    void (*hook)(void *) = thread_wait_hook;
    if (hook != NULL) {
        thread_wait_hook = NULL; /* one-shot, and cleared first: the hook may set it again */
        hook(thread_wait_hook_context);
    }
}

int skc_openssl_init(void) {
    return OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS,
                            NULL);
}

int skc_tls_ctx_set_versions(SSL_CTX *context, int minimum, int maximum) {
    return SSL_CTX_set_min_proto_version(context, minimum) == 1 &&
           SSL_CTX_set_max_proto_version(context, maximum) == 1;
}

void skc_tls_ctx_set_engine_options(SSL_CTX *context) {
    SSL_CTX_set_options(context, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

void skc_tls_ctx_set_client_session_cache(SSL_CTX *context) {
    SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
}

void skc_tls_ctx_disable_sessions(SSL_CTX *context) {
    SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(context, SSL_OP_NO_TICKET);
}

int skc_tls_set_server_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

int skc_tls_set_verify_store(SSL *ssl, X509_STORE *store) {
    return (int)SSL_set1_verify_cert_store(ssl, store);
}

void skc_tls_ctx_set_servername_callback(SSL_CTX *context, int (*callback)(SSL *ssl, int *alert, void *argument)) {
    SSL_CTX_set_tlsext_servername_callback(context, callback);
}

void skc_tls_ctx_set_status_callback(SSL_CTX *context, int (*callback)(SSL *ssl, void *argument)) {
    SSL_CTX_set_tlsext_status_cb(context, callback);
}

int skc_tls_request_status(SSL *ssl) {
    return (int)SSL_set_tlsext_status_type(ssl, TLSEXT_STATUSTYPE_ocsp);
}

long skc_tls_status_response(SSL *ssl, const unsigned char **bytes) {
    unsigned char *response = NULL;
    long length = SSL_get_tlsext_status_ocsp_resp(ssl, &response);
    *bytes = response;
    return response == NULL ? -1 : length;
}

int skc_tls_set_status_response(SSL *ssl, const unsigned char *bytes, size_t length) {
    /* The SSL frees the response with OPENSSL_free: it must be OpenSSL's memory. */
    unsigned char *copy = OPENSSL_memdup(bytes, length);
    if (copy == NULL) return 0;
    if (SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)length) != 1) {
        OPENSSL_free(copy);
        return 0;
    }
    return 1;
}

static OCSP_BASICRESP *skc_ocsp_basic(const unsigned char *bytes, size_t length, int *result) {
    const unsigned char *cursor = bytes;
    OCSP_RESPONSE *response = d2i_OCSP_RESPONSE(NULL, &cursor, (long)length);
    if (response == NULL || cursor != bytes + length) {
        OCSP_RESPONSE_free(response);
        *result = SKC_OCSP_MALFORMED;
        return NULL;
    }
    if (OCSP_response_status(response) != OCSP_RESPONSE_STATUS_SUCCESSFUL) {
        OCSP_RESPONSE_free(response);
        *result = SKC_OCSP_UNSUCCESSFUL;
        return NULL;
    }
    OCSP_BASICRESP *basic = OCSP_response_get1_basic(response);
    OCSP_RESPONSE_free(response);
    *result = basic == NULL ? SKC_OCSP_MALFORMED : SKC_OCSP_GOOD;
    return basic;
}

int skc_ocsp_parse(const unsigned char *bytes, size_t length) {
    int result;
    OCSP_BASICRESP *basic = skc_ocsp_basic(bytes, length, &result);
    OCSP_BASICRESP_free(basic);
    return result;
}

int skc_ocsp_check(SSL *ssl, const unsigned char *bytes, size_t length, long leeway, int *reason) {
    *reason = -1;
    int result;
    OCSP_BASICRESP *basic = skc_ocsp_basic(bytes, length, &result);
    if (basic == NULL) return result;
    /* The chain OpenSSL verified (leaf first, then its issuer): the staple must speak for this
     * leaf as issued by this issuer, not for whatever the server chose to send. */
    STACK_OF(X509) *chain = SSL_get0_verified_chain(ssl);
    X509_STORE *store = NULL;
    SSL_get0_verify_cert_store(ssl, &store);
    if (store == NULL) store = SSL_CTX_get_cert_store(SSL_get_SSL_CTX(ssl));
    if (chain == NULL || sk_X509_num(chain) < 2) {
        OCSP_BASICRESP_free(basic);
        return SKC_OCSP_NO_CHAIN;
    }
    X509 *leaf = sk_X509_value(chain, 0);
    X509 *issuer = sk_X509_value(chain, 1);
    /* The chain is offered as untrusted certificates: the responder (the issuer itself, or a
     * delegate with the OCSPSigning purpose it issued) must still chain to the store. */
    if (OCSP_basic_verify(basic, chain, store, 0) <= 0) {
        OCSP_BASICRESP_free(basic);
        return SKC_OCSP_UNVERIFIED;
    }
    OCSP_CERTID *id = OCSP_cert_to_id(NULL, leaf, issuer);
    int status = -1;
    ASN1_GENERALIZEDTIME *thisUpdate = NULL, *nextUpdate = NULL;
    if (id == NULL || OCSP_resp_find_status(basic, id, &status, reason, NULL, &thisUpdate, &nextUpdate) != 1) {
        result = SKC_OCSP_NO_STATUS;
    } else if (OCSP_check_validity(thisUpdate, nextUpdate, leeway, -1) != 1) {
        result = SKC_OCSP_NOT_CURRENT;
    } else if (status == V_OCSP_CERTSTATUS_GOOD) {
        result = SKC_OCSP_GOOD;
    } else if (status == V_OCSP_CERTSTATUS_REVOKED) {
        result = SKC_OCSP_REVOKED;
    } else {
        result = SKC_OCSP_UNKNOWN;
    }
    OCSP_CERTID_free(id);
    OCSP_BASICRESP_free(basic);
    return result;
}

void skc_bio_set_mem_eof_return(BIO *bio, int value) {
    BIO_set_mem_eof_return(bio, value);
}

int skc_err_lib(unsigned long error) { return ERR_GET_LIB(error); }
int skc_err_reason(unsigned long error) { return ERR_GET_REASON(error); }

int skc_x509_stack_count(const STACK_OF(X509) *stack) { return stack ? sk_X509_num(stack) : 0; }
X509 *skc_x509_stack_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
STACK_OF(X509) *skc_x509_stack_new(void) { return sk_X509_new_null(); }
int skc_x509_stack_push(STACK_OF(X509) *stack, X509 *certificate) { return sk_X509_push(stack, certificate); }
void skc_x509_stack_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }

int skc_pkcs12_parse(const unsigned char *bytes, size_t length, const char *password, EVP_PKEY **key,
                     X509 **certificate, STACK_OF(X509) **chain, int *why) {
    *key = NULL;
    *certificate = NULL;
    *chain = NULL;
    if (length > LONG_MAX) {
        *why = SKC_PKCS12_NOT_PKCS12;
        return 0;
    }
    const unsigned char *cursor = bytes;
    PKCS12 *p12 = d2i_PKCS12(NULL, &cursor, (long)length);
    if (p12 == NULL) {
        *why = SKC_PKCS12_NOT_PKCS12;
        return 0;
    }
    int parsed = PKCS12_parse(p12, password, key, certificate, chain);
    PKCS12_free(p12);
    if (!parsed) {
        /* PKCS12_parse checks the MAC first and raises MAC_VERIFY_FAILURE last; a cipher
         * no provider has (RC2-40 without the legacy provider) fails the fetch first. */
        unsigned long first = ERR_peek_error(), last = ERR_peek_last_error();
        if (ERR_GET_LIB(last) == ERR_LIB_PKCS12 && ERR_GET_REASON(last) == PKCS12_R_MAC_VERIFY_FAILURE) {
            *why = SKC_PKCS12_WRONG_PASSWORD;
        } else if (ERR_GET_REASON(first) == ERR_R_UNSUPPORTED
                   || (ERR_GET_LIB(first) == ERR_LIB_EVP && ERR_GET_REASON(first) == EVP_R_UNSUPPORTED_ALGORITHM)) {
            *why = SKC_PKCS12_UNSUPPORTED;
        } else {
            *why = SKC_PKCS12_OTHER;
        }
        return 0; /* PKCS12_parse frees what it made when it fails */
    }
    if (*key == NULL || *certificate == NULL) {
        EVP_PKEY_free(*key);
        X509_free(*certificate);
        sk_X509_pop_free(*chain, X509_free);
        *key = NULL;
        *certificate = NULL;
        *chain = NULL;
        *why = SKC_PKCS12_NO_IDENTITY;
        return 0;
    }
    /* No intermediates: an empty stack, as for a PEM chain of one certificate. A NULL chain
     * would let OpenSSL build one from the verify store and send the roots too. */
    if (*chain == NULL && (*chain = sk_X509_new_null()) == NULL) {
        EVP_PKEY_free(*key);
        X509_free(*certificate);
        *key = NULL;
        *certificate = NULL;
        *why = SKC_PKCS12_OTHER;
        return 0;
    }
    return 1;
}
