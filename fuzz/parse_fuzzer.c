/* SPDX-License-Identifier: MIT */
/*
 * parse_fuzzer.c - addresses, host and interface text, and every settings setter, against
 * models: the C library (inet_ntop, getnameinfo, getaddrinfo with AI_NUMERICHOST, getifaddrs),
 * OpenSSL itself (is this cipher list valid?), the file system (can this key-log path be
 * opened?) and the header's stated ranges.
 *
 * Each input is a list of operations:
 *   - sk_address_get_host / _get_port / _is_ipv4 / _is_ipv6 on an address of any family and
 *     length (the bytes behind it always readable): a complete IPv4 or IPv6 address, from
 *     its family's size up to sockaddr_storage's, gives what getnameinfo gives, under the
 *     snprintf rule at every capacity; anything else is refused;
 *   - sk_lookup_host_addresses / sk_lookup_host on text made of literal-ish characters: only
 *     text that getaddrinfo takes as numeric (or localhost, loopback, empty) is looked up, so
 *     no DNS server is ever asked; an inet_pton literal gives exactly itself;
 *   - a listener on an interface description (the header's forms: name, IP literal,
 *     "name:port", "[v6]:port", ":port"): a name that is no interface of this machine is
 *     SK_ERR_BAD_PARAM, a bad port too, a real interface listens (its port when given);
 *   - every TCP, UDP and TLS setter with edge values: the header's ranges decide SK_OK or
 *     SK_ERR_BAD_PARAM, and the getter gives the value back;
 *   - TLS settings checked (sk_tls_settings_check) after random setters: refused exactly when
 *     the model says (an empty peer name, a cipher list OpenSSL refuses or that lowers the
 *     security level below 2, a key-log file that cannot be opened, a NUL inside PEM text,
 *     a server without its certificate and key, a maximum version below the minimum);
 *   - PROXY protocol headers (v1, v2, either; made from templates, mutated, cut short, sent in
 *     up to three writes, then a FIN) against a model written from the specification: a
 *     connection is accepted exactly when the model completes the header, with its source
 *     and destination (or the real addresses for LOCAL / UNKNOWN) and the bytes after it as
 *     its first read; otherwise it is closed and never reported.
 */
#include "fuzz_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static sk_loop_group_t *group;
static char cert_file[512], key_file[512], temp_directory[64];
static char context_line[1024];

static void print_context(void) {
    fprintf(stderr, "parse fuzzer, last operation: %s\n", context_line);
}

/* ---- The snprintf rule ----------------------------------------------------------------------- */

/* Checks a text getter (buffer, capacity) -> result against `expected` at several capacities. */
typedef int (*text_getter_t)(void *context, char *buffer, size_t capacity);

static void check_text(text_getter_t getter, void *context, const char *expected, const char *what) {
    int length = (int)strlen(expected);
    char space[300];
    size_t capacities[] = {sizeof space, (size_t)length + 1, (size_t)length, 1, 0};
    for (size_t i = 0; i < sizeof capacities / sizeof capacities[0]; i++) {
        size_t capacity = capacities[i];
        if (capacity > sizeof space) continue;
        memset(space, 'X', sizeof space);
        int result = getter(context, space, capacity);
        FZ_CHECK(result == length, "%s with capacity %zu returned %d, expected %d (\"%s\")", what, capacity, result, length,
                 expected);
        if (capacity > 0) {
            size_t kept = (size_t)length < capacity - 1 ? (size_t)length : capacity - 1;
            FZ_CHECK(strncmp(space, expected, kept) == 0 && space[kept] == 0, "%s with capacity %zu: \"%.*s\"", what,
                     capacity, (int)kept + 1, space);
            FZ_CHECK(capacity == sizeof space || space[capacity] == 'X', "%s wrote past its capacity %zu", what, capacity);
        } else {
            FZ_CHECK(space[0] == 'X', "%s wrote into a buffer of capacity 0", what);
        }
    }
    FZ_CHECK(getter(context, NULL, 64) == length, "%s with a NULL buffer", what);
}

/* ---- Addresses -------------------------------------------------------------------------------- */

typedef struct address_case {
    const struct sockaddr *address;
    socklen_t length;
} address_case_t;

static int get_host(void *context, char *buffer, size_t capacity) {
    address_case_t *item = context;
    return sk_address_get_host(item->address, item->length, buffer, capacity);
}

static void op_address(fz_input_t *input) {
    /* 256 readable bytes behind the pointer, whatever the length says. */
    union {
        struct sockaddr_storage storage;
        unsigned char bytes[256];
    } space;
    memset(&space, 0xAB, sizeof space);
    for (size_t i = 0; i < 32; i++) space.bytes[i] = fz_u8(input);
    uint8_t family = fz_u8(input) % 5;
    struct sockaddr *address = (struct sockaddr *)&space;
    address->sa_family = family == 0 ? AF_INET : family == 1 ? AF_INET6 : family == 2 ? AF_UNIX : family == 3 ? AF_UNSPEC
                                                                                                 : fz_u16(input);
    socklen_t lengths[] = {0, 1, 2, sizeof(struct sockaddr_in) - 1, sizeof(struct sockaddr_in),
                           sizeof(struct sockaddr_in6) - 1, sizeof(struct sockaddr_in6), sizeof(struct sockaddr_un),
                           sizeof(struct sockaddr_storage), sizeof(struct sockaddr_storage) + 1, 255};
    socklen_t length = fz_u8(input) % 4 == 0 ? (socklen_t)fz_range(input, 0, 256) : lengths[fz_u8(input) % 11];
    int null = fz_u8(input) % 16 == 0;
    snprintf(context_line, sizeof context_line, "address family %d length %u%s", address->sa_family, length,
             null ? " NULL" : "");
    const struct sockaddr *argument = null ? NULL : address;

    int ipv4 = !null && address->sa_family == AF_INET && length >= sizeof(struct sockaddr_in) &&
               length <= sizeof(struct sockaddr_storage);
    int ipv6 = !null && address->sa_family == AF_INET6 && length >= sizeof(struct sockaddr_in6) &&
               length <= sizeof(struct sockaddr_storage);
    FZ_CHECK(sk_address_is_ipv4(argument, length) == ipv4, "sk_address_is_ipv4 (%s)", context_line);
    FZ_CHECK(sk_address_is_ipv6(argument, length) == ipv6, "sk_address_is_ipv6 (%s)", context_line);
    uint16_t port = 0xBEEF;
    int result = sk_address_get_port(argument, length, fz_u8(input) % 8 ? &port : NULL);
    if (ipv4 || ipv6) {
        FZ_CHECK(result == SK_OK, "sk_address_get_port refused a complete address (%s): %s", context_line, fz_error_name(result));
        uint16_t expected = ntohs(ipv4 ? ((struct sockaddr_in *)address)->sin_port : ((struct sockaddr_in6 *)address)->sin6_port);
        FZ_CHECK(port == expected || port == 0xBEEF, "sk_address_get_port gave %u, expected %u", port, expected);
        char expected_host[NI_MAXHOST];
        FZ_CHECK(getnameinfo(address, ipv4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6), expected_host,
                             sizeof expected_host, NULL, 0, NI_NUMERICHOST) == 0, "getnameinfo");
        address_case_t item = {argument, length};
        check_text(get_host, &item, expected_host, "sk_address_get_host");
    } else {
        FZ_CHECK(result == SK_ERR_BAD_PARAM, "sk_address_get_port took an incomplete address (%s): %s", context_line,
                 fz_error_name(result));
        char buffer[64];
        result = sk_address_get_host(argument, length, buffer, sizeof buffer);
        FZ_CHECK(result == SK_ERR_BAD_PARAM, "sk_address_get_host took an incomplete address (%s): %d", context_line, result);
    }
}

/* ---- Host text --------------------------------------------------------------------------------- */

static void make_text(fz_input_t *input, char *text, size_t capacity) {
    static const char *pieces[] = {"127.0.0.1", "::1", "::", "0", "1", "255", "256", ".", ":", "::ffff:", "[", "]", "%",
                                   "lo", "eth0", "fe80::1", "0x7f", "017", "localhost", "loopback", "1.2.3.4", "a", "z",
                                   "-", "+", "65535", "65536", "99999", "0.0.0.0", "fd00::2", "192.0.2.2", "2130706433"};
    size_t used = 0;
    text[0] = 0;
    int count = 1 + fz_u8(input) % 4;
    for (int i = 0; i < count; i++) {
        const char *piece = pieces[fz_u8(input) % (sizeof pieces / sizeof pieces[0])];
        size_t length = strlen(piece);
        if (used + length + 1 >= capacity) break;
        memcpy(text + used, piece, length + 1);
        used += length;
    }
}

/* Whether getaddrinfo takes `host` as numeric (then it never asks a DNS server). */
static int numeric_host(const char *host, struct addrinfo **list) {
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    return getaddrinfo(host, NULL, &hints, list) == 0;
}

static int same_address(const struct sockaddr *a, const struct sockaddr *b) {
    if (a->sa_family != b->sa_family) return 0;
    if (a->sa_family == AF_INET) {
        return memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr, 4) == 0;
    }
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
    return memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0 && x->sin6_scope_id == y->sin6_scope_id;
}

static void op_lookup(fz_input_t *input) {
    char host[64];
    make_text(input, host, sizeof host);
    int special = strcmp(host, "localhost") == 0 || strcmp(host, "loopback") == 0;
    struct addrinfo *list = NULL;
    if (!special && !numeric_host(host, &list)) return;   /* would go to a DNS server */
    uint16_t port = fz_u16(input);
    size_t capacity = fz_range(input, 0, 4);
    snprintf(context_line, sizeof context_line, "lookup \"%s\" port %u capacity %zu", host, port, capacity);
    sk_address_t found[4];
    memset(found, 0xEE, sizeof found);
    sk_error_t error;
    int count = sk_lookup_host_addresses(host, port, fz_u8(input) % 8 ? found : NULL, capacity, &error);
    unsigned char inet[16];
    int literal = inet_pton(AF_INET, host, inet) == 1 || inet_pton(AF_INET6, host, inet) == 1;
    if (special) {
        FZ_CHECK(count == 2, "%s: %d addresses", context_line, count);
    } else if (literal) {
        FZ_CHECK(count == 1, "%s: a literal gave %d addresses (%s)", context_line, count, count < 0 ? error.message : "");
    } else {
        FZ_CHECK(count >= 1 || count == SK_ERR_RESOLUTION, "%s: %s", context_line, fz_error_name(count));
    }
    if (count > 0 && !special) {
        /* Every address getaddrinfo gives, in its order, with the port. */
        int index = 0;
        for (struct addrinfo *entry = list; entry && index < (int)capacity && index < count; entry = entry->ai_next) {
            if (index > 0 && same_address(entry->ai_addr, (struct sockaddr *)&found[index - 1].address)) continue;
            const struct sockaddr *got = (const struct sockaddr *)&found[index].address;
            if (found[index].length == 0xEEEEEEEE) break;   /* addresses NULL: nothing written */
            FZ_CHECK(same_address(entry->ai_addr, got), "%s: address %d differs from getaddrinfo's", context_line, index);
            FZ_CHECK(found[index].length == (got->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)),
                     "%s: address %d has length %u", context_line, index, found[index].length);
            uint16_t got_port = 0;
            FZ_CHECK(sk_address_get_port(got, found[index].length, &got_port) == SK_OK && got_port == port,
                     "%s: address %d has port %u", context_line, index, got_port);
            index++;
            if (literal) break;
        }
    }
    for (int i = count > 0 ? (count < (int)capacity ? count : (int)capacity) : 0; i < 4; i++) {
        FZ_CHECK(found[i].length == 0xEEEEEEEE, "%s: wrote address %d beyond what it reported or its capacity", context_line, i);
    }
    /* The older form agrees. */
    struct sockaddr_storage storage[4];
    size_t older = 99;
    int result = sk_lookup_host(host, port, storage, 4, &older, NULL);
    if (count > 0) {
        FZ_CHECK(result == SK_OK && older == (size_t)(count < 4 ? count : 4), "%s: sk_lookup_host gave %s, %zu", context_line,
                 fz_error_name(result), older);
    } else {
        FZ_CHECK(result == count, "%s: sk_lookup_host gave %s", context_line, fz_error_name(result));
    }
    if (list) freeaddrinfo(list);
}

/* ---- Interfaces --------------------------------------------------------------------------------- */

static int interface_exists(const char *name, int *has_address) {
    struct ifaddrs *list = NULL;
    int known = 0;
    *has_address = 0;
    if (getifaddrs(&list) != 0) return 0;
    for (struct ifaddrs *entry = list; entry; entry = entry->ifa_next) {
        if (strcmp(entry->ifa_name, name) != 0) continue;
        known = 1;
        if (entry->ifa_addr && (entry->ifa_addr->sa_family == AF_INET || entry->ifa_addr->sa_family == AF_INET6)) {
            *has_address = 1;
        }
    }
    freeifaddrs(list);
    return known;
}

static int ip_literal(const char *text) {
    unsigned char bytes[16];
    return inet_pton(AF_INET, text, bytes) == 1 || inet_pton(AF_INET6, text, bytes) == 1;
}

/* A port as the description writes it: decimal digits only, 0...65535 (-1: not a port;
 * -2: a form the model does not decide, such as a sign). */
static long parse_port(const char *text) {
    if (*text == 0) return -1;
    if (*text == '+' || *text == '-') return -2;
    long value = 0;
    for (const char *c = text; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        value = value * 10 + (*c - '0');
        if (value > 65535) return -1;
    }
    return value;
}

typedef enum { IF_REFUSED, IF_ACCEPTED, IF_UNDECIDED } verdict_t;

/* The model of the header's interface forms: the name and port it means, or refused. */
static verdict_t interface_model(const char *description, char *name, size_t capacity, long *port) {
    *port = -1;
    if (description[0] == '[') {
        const char *close = strchr(description, ']');
        if (!close) return IF_REFUSED;
        snprintf(name, capacity, "%.*s", (int)(close - description - 1), description + 1);
        if (close[1] == 0) return IF_ACCEPTED;
        if (close[1] != ':') return IF_REFUSED;
        *port = parse_port(close + 2);
        return *port == -2 ? IF_UNDECIDED : *port < 0 ? IF_REFUSED : IF_ACCEPTED;
    }
    if (strchr(description, '%')) return IF_UNDECIDED;   /* scoped literals: not the model's business */
    if (ip_literal(description)) {
        snprintf(name, capacity, "%s", description);
        return IF_ACCEPTED;
    }
    const char *colon = strrchr(description, ':');
    if (!colon) {
        snprintf(name, capacity, "%s", description);
        return IF_ACCEPTED;
    }
    snprintf(name, capacity, "%.*s", (int)(colon - description), description);
    *port = parse_port(colon + 1);
    return *port == -2 ? IF_UNDECIDED : *port < 0 ? IF_REFUSED : IF_ACCEPTED;
}

static sk_socket_delegate_t quiet_delegate;

static void op_interface(fz_input_t *input) {
    char description[64];
    make_text(input, description, sizeof description);
    if (fz_u8(input) % 3 == 0) {
        /* A port of our choosing: 0 (the kernel picks) or one that is likely free. */
        size_t used = strlen(description);
        snprintf(description + used, sizeof description - used, ":%u", fz_u8(input) % 2 ? 0u : 40000u + fz_u16(input) % 20000);
    }
    char name[64];
    long port;
    verdict_t verdict = interface_model(description, name, sizeof name, &port);
    int has_address = 0;
    if (verdict == IF_ACCEPTED && name[0] && strcmp(name, "localhost") != 0 && strcmp(name, "loopback") != 0 &&
        !ip_literal(name)) {
        if (!interface_exists(name, &has_address) || !has_address) verdict = IF_REFUSED;
    }
    snprintf(context_line, sizeof context_line, "accept on interface \"%s\" (model: %s, name \"%s\", port %ld)", description,
             verdict == IF_ACCEPTED ? "accepted" : verdict == IF_REFUSED ? "refused" : "undecided", name, port);
    sk_socket_t *listener = NULL;
    FZ_CHECK(sk_socket_create(&quiet_delegate, sizeof quiet_delegate, NULL, NULL, group, &listener, NULL) == SK_OK, "create");
    sk_error_t error;
    int result = sk_socket_accept_on_interface(listener, description, 0, &error);
    if (verdict == IF_REFUSED) {
        FZ_CHECK(result == SK_ERR_BAD_PARAM, "%s: %s (%s)", context_line, fz_error_name(result), result ? error.message : "");
    } else if (verdict == IF_ACCEPTED) {
        /* A literal this machine does not have, or a port in use: the kernel's refusal. */
        FZ_CHECK(result == SK_OK || result == SK_ERR_SYSTEM, "%s: %s (%s)", context_line, fz_error_name(result),
                 result ? error.message : "");
        if (result == SK_OK) {
            FZ_CHECK(sk_socket_is_accepting(listener) == 1, "%s: not accepting", context_line);
            uint16_t bound = 0;
            FZ_CHECK(sk_socket_get_local_port(listener, &bound) == SK_OK && bound != 0, "%s: no port", context_line);
            if (port > 0) FZ_CHECK(bound == port, "%s: listening on port %u", context_line, bound);
            /* A listener's disconnect returns with its descriptors closed: its address is
             * free at once (a bind to exactly that address, which a listening socket on it
             * would refuse, succeeds; IPv6 only for an IPv6 listener, as SocketKit's are). */
            struct sockaddr_storage local;
            socklen_t local_length = sizeof local;
            FZ_CHECK(sk_socket_get_local_address(listener, (struct sockaddr *)&local, &local_length) > 0, "%s: address",
                     context_line);
            FZ_CHECK(sk_socket_disconnect(listener) == SK_OK, "%s: disconnect", context_line);
            int probe = socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int one = 1;
            setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (local.ss_family == AF_INET6) setsockopt(probe, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
            int taken = bind(probe, (struct sockaddr *)&local, local_length) == 0;
            int error_number = errno;
            close(probe);
            FZ_CHECK(taken, "%s: port %u still taken after sk_socket_disconnect returned (errno %d)", context_line, bound,
                     error_number);
        }
    }
    sk_socket_release(listener);
}

/* ---- Setters ------------------------------------------------------------------------------------- */

static size_t size_value(fz_input_t *input) {
    return fz_size(input);
}

/* A Unix-domain address whose path has a NUL followed by more bytes is refused: the kernel
 * would end the path at the NUL (an abstract address, first byte NUL, is taken as given). */
static void op_unix_address(fz_input_t *input) {
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t used = (size_t)snprintf(address.sun_path, sizeof address.sun_path, "%s/u%d", temp_directory, fz_u8(input) % 4);
    uint8_t kind = fz_u8(input) % 3;
    if (kind == 1) {
        address.sun_path[used] = 0;
        memcpy(address.sun_path + used + 1, "more", 4);
        used += 5;
    } else if (kind == 2) {
        memmove(address.sun_path + 1, address.sun_path, used);
        address.sun_path[0] = 0;
        used += 1;
    }
    socklen_t length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + used + (kind == 0));
    snprintf(context_line, sizeof context_line, "unix address (%s)", kind == 0 ? "plain" : kind == 1 ? "NUL then more" : "abstract");
    sk_socket_t *sock = NULL;
    FZ_CHECK(sk_socket_create(&quiet_delegate, sizeof quiet_delegate, NULL, NULL, group, &sock, NULL) == SK_OK, "create");
    sk_error_t error;
    int result = sk_socket_connect_to_address(sock, (struct sockaddr *)&address, length, NULL, 1, &error);
    if (kind == 1) {
        FZ_CHECK(result == SK_ERR_BAD_PARAM, "%s: %s", context_line, fz_error_name(result));
    } else {
        FZ_CHECK(result == SK_OK, "%s: %s (%s)", context_line, fz_error_name(result), result ? error.message : "");
    }
    sk_socket_release(sock);
}

static void op_tcp_setters(fz_input_t *input) {
    sk_socket_t *sock = NULL;
    FZ_CHECK(sk_socket_create(&quiet_delegate, sizeof quiet_delegate, NULL, NULL, group, &sock, NULL) == SK_OK, "create");
    for (int step = 0; step < 6; step++) {
        uint8_t which = fz_u8(input) % 9;
        snprintf(context_line, sizeof context_line, "tcp setter %d", which);
        switch (which) {
        case 0: {
            int value = (int)fz_u32(input);
            FZ_CHECK(sk_socket_set_ipv4_enabled(sock, value) == SK_OK && sk_socket_is_ipv4_enabled(sock) == (value != 0),
                     "ipv4 enabled %d", value);
            break;
        }
        case 1: {
            double value = fz_timeout(input);
            FZ_CHECK(sk_socket_set_alternate_address_delay(sock, value) == SK_OK, "alternate delay %g", value);
            double back = -5;
            sk_socket_get_alternate_address_delay(sock, &back);
            double expected = isnan(value) || value < 0 ? 0 : value;
            FZ_CHECK(back == expected, "alternate delay %g reads back as %g", value, back);
            break;
        }
        case 2: {
            size_t value = size_value(input);
            int result = sk_socket_set_maximum_read_length(sock, value);
            int valid = value >= 1 && value <= (size_t)SSIZE_MAX;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "maximum read length %zu: %s", value, fz_error_name(result));
            size_t back = 0;
            sk_socket_get_maximum_read_length(sock, &back);
            if (valid) FZ_CHECK(back == value, "maximum read length %zu reads back as %zu", value, back);
            break;
        }
        case 3: {
            size_t low = size_value(input), high = size_value(input);
            size_t old_low = 0, old_high = 0;
            sk_socket_get_write_watermarks(sock, &old_low, &old_high);
            int result = sk_socket_set_write_watermarks(sock, low, high, NULL);
            int valid = low <= high && high <= (size_t)SSIZE_MAX;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "watermarks %zu %zu: %s", low, high, fz_error_name(result));
            size_t new_low = 0, new_high = 0;
            sk_socket_get_write_watermarks(sock, &new_low, &new_high);
            FZ_CHECK(valid ? (new_low == low && new_high == high) : (new_low == old_low && new_high == old_high),
                     "watermarks %zu %zu read back as %zu %zu", low, high, new_low, new_high);
            break;
        }
        case 4: {
            size_t value = size_value(input);
            int result = sk_socket_set_maximum_queued_write_bytes(sock, value);
            int valid = value <= (size_t)SSIZE_MAX;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "maximum queued write bytes %zu: %s", value,
                     fz_error_name(result));
            size_t back = 1;
            sk_socket_get_maximum_queued_write_bytes(sock, &back);
            if (valid) FZ_CHECK(back == value, "maximum queued %zu reads back as %zu", value, back);
            break;
        }
        case 5: {
            int enabled = fz_u8(input) % 2, idle = (int)fz_u32(input) % 40000 - 100, interval = (int)fz_u16(input) - 10,
                count = (int)fz_u8(input) - 5;
            int result = sk_socket_set_keep_alive(sock, enabled, idle, interval, count, NULL);
            int valid = !enabled || (idle >= 1 && idle <= 32767 && interval >= 1 && interval <= 32767 && count >= 1 && count <= 127);
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "keep-alive %d %d %d %d: %s", enabled, idle, interval, count,
                     fz_error_name(result));
            int e = -1, i = -1, n = -1, c = -1;
            sk_socket_get_keep_alive(sock, &e, &i, &n, &c);
            if (valid && enabled) FZ_CHECK(e == 1 && i == idle && n == interval && c == count, "keep-alive read back");
            if (valid && !enabled) FZ_CHECK(e == 0, "keep-alive off read back as %d", e);
            break;
        }
        case 6: {
            int send = (int)fz_u32(input), receive = fz_u8(input) % 2 ? (int)fz_u32(input) : 0;
            int result = sk_socket_set_buffer_sizes(sock, send, receive, NULL);
            int valid = send >= 0 && receive >= 0;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "buffer sizes %d %d: %s", send, receive, fz_error_name(result));
            int s = -1, r = -1;
            sk_socket_get_buffer_sizes(sock, &s, &r);
            if (valid) FZ_CHECK(s == send && r == receive, "buffer sizes read back as %d %d", s, r);
            break;
        }
        case 7: {
            int value = (int)fz_u32(input);
            FZ_CHECK(sk_socket_set_no_delay(sock, value) == SK_OK && sk_socket_get_no_delay(sock) == (value != 0), "no delay");
            FZ_CHECK(sk_socket_set_auto_disconnect_on_closed_read_stream(sock, value) == SK_OK &&
                         sk_socket_get_auto_disconnect_on_closed_read_stream(sock) == (value != 0), "auto disconnect");
            FZ_CHECK(sk_socket_set_ipv4_preferred_over_ipv6(sock, value) == SK_OK &&
                         sk_socket_is_ipv4_preferred_over_ipv6(sock) == (value != 0), "ipv4 preferred");
            break;
        }
        default: {
            int value = (int)fz_u32(input);
            FZ_CHECK(sk_socket_set_ipv6_enabled(sock, value) == SK_OK && sk_socket_is_ipv6_enabled(sock) == (value != 0),
                     "ipv6 enabled");
            break;
        }
        }
    }
    sk_socket_release(sock);
}

static void op_udp_setters(fz_input_t *input) {
    sk_udp_socket_t *sock = NULL;
    FZ_CHECK(sk_udp_socket_create(NULL, 0, NULL, NULL, group, &sock, NULL) == SK_OK, "udp create");
    for (int step = 0; step < 6; step++) {
        uint8_t which = fz_u8(input) % 5;
        snprintf(context_line, sizeof context_line, "udp setter %d", which);
        switch (which) {
        case 0: {
            int value = (int)fz_u32(input) % 5 - 1;
            int result = sk_udp_socket_set_address_preference(sock, value);
            int valid = value >= 0 && value <= 2;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "address preference %d: %s", value, fz_error_name(result));
            if (valid) FZ_CHECK(sk_udp_socket_get_address_preference(sock) == value, "preference read back");
            break;
        }
        case 1: {
            size_t v4 = fz_u8(input) % 2 ? fz_range(input, 0, 70000) : size_value(input), v6 = fz_range(input, 0, 70000);
            int result = sk_udp_socket_set_max_receive_sizes(sock, v4, v6, NULL);
            int valid = v4 >= 1 && v4 <= 65535 && v6 >= 1 && v6 <= 65535;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "max receive sizes %zu %zu: %s", v4, v6, fz_error_name(result));
            size_t a = 0, b = 0;
            sk_udp_socket_get_max_receive_sizes(sock, &a, &b);
            if (valid) FZ_CHECK(a == v4 && b == v6, "max receive sizes read back as %zu %zu", a, b);
            break;
        }
        case 2: {
            int send = (int)fz_u32(input), receive = (int)fz_u16(input);
            int result = sk_udp_socket_set_buffer_sizes(sock, send, receive, NULL);
            int valid = send >= 0;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "udp buffer sizes %d %d: %s", send, receive,
                     fz_error_name(result));
            int s = -1, r = -1;
            sk_udp_socket_get_buffer_sizes(sock, &s, &r);
            if (valid) FZ_CHECK(s == send && r == receive, "udp buffer sizes read back as %d %d", s, r);
            break;
        }
        case 3: {
            int ttl = (int)fz_u16(input) - 10;
            int result = sk_udp_socket_set_multicast_ttl(sock, ttl, NULL);
            int valid = ttl >= 0 && ttl <= 255;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "multicast ttl %d: %s", ttl, fz_error_name(result));
            break;
        }
        default: {
            int value = (int)fz_u32(input);
            FZ_CHECK(sk_udp_socket_set_ipv4_enabled(sock, value) == SK_OK && sk_udp_socket_is_ipv4_enabled(sock) == (value != 0),
                     "udp ipv4 enabled");
            FZ_CHECK(sk_udp_socket_set_ipv6_enabled(sock, !value) == SK_OK && sk_udp_socket_is_ipv6_enabled(sock) == (value == 0),
                     "udp ipv6 enabled");
            break;
        }
        }
    }
    sk_udp_socket_release(sock);
}

/* ---- TLS settings against OpenSSL and the file system ------------------------------------------ */

static const char *cipher_lists[] = {"DEFAULT", "HIGH", "ECDHE-RSA-AES128-GCM-SHA256", "ALL:@SECLEVEL=0", "DEFAULT@SECLEVEL=1",
                                     "HIGH:@SECLEVEL=2", "HIGH:@SECLEVEL=3", "nonsense", "", "!ALL", "AES128:@SECLEVEL=1x",
                                     "@SECLEVEL=0:HIGH", "eNULL", "ALL", "DEFAULT:@SECLEVEL=5"};

/* OpenSSL's verdict on a cipher list, on a context of its own. */
static int openssl_accepts_list(const char *list) {
    SSL_CTX *context = SSL_CTX_new(TLS_method());
    int accepted = SSL_CTX_set_cipher_list(context, list) == 1;
    SSL_CTX_free(context);
    return accepted;
}

/* Whether the list asks for a security level below 2 ("@SECLEVEL=0" or "=1"). */
static int lowers_level(const char *list) {
    for (const char *at = strstr(list, "@SECLEVEL="); at; at = strstr(at + 1, "@SECLEVEL=")) {
        if (at[10] == '0' || at[10] == '1') return 1;
    }
    return 0;
}

/* Whether the list raises the security level above 3: the harness's P-256 key (128-bit
 * security, level 3) is then too small, and OpenSSL refuses the certificate ("ee key too
 * small"). Raising the level is the caller's business; the refusal must be a settings error. */
static int raises_above_the_keys_level(const char *list) {
    for (const char *at = strstr(list, "@SECLEVEL="); at; at = strstr(at + 1, "@SECLEVEL=")) {
        if (at[10] >= '4' && at[10] <= '9') return 1;
    }
    return 0;
}

static int key_log_opens(const char *path) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

static void op_tls(fz_input_t *input) {
    int role = fz_u8(input) % 2;
    sk_tls_settings_t *settings = NULL;
    FZ_CHECK(sk_tls_settings_create(role, &settings, NULL) == SK_OK, "tls settings create");
    int has_certificate = 0, has_key = 0, bad_certificate = 0, bad_key = 0, empty_peer_name = 0, bad_cipher = 0,
        bad_key_log = 0, bad_pem = 0, bad_versions = 0, minimum = 0, maximum = 0, bad_trust = 0, client_requires = 0,
        level_above_key = 0;
    size_t used = 0;
    used += (size_t)snprintf(context_line + used, sizeof context_line - used, "tls %s:", role ? "server" : "client");
    for (int step = 0; step < 5; step++) {
        uint8_t which = fz_u8(input) % 10;
        int result = SK_OK;
        switch (which) {
        case 0: {
            static const char *names[] = {NULL, "", "localhost", "a", "127.0.0.1"};
            const char *name = names[fz_u8(input) % 5];
            result = sk_tls_settings_set_peer_name(settings, name);
            empty_peer_name = name && name[0] == 0;
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " peer-name(%s)", name ? name : "NULL");
            break;
        }
        case 1: {
            const char *list = cipher_lists[fz_u8(input) % (sizeof cipher_lists / sizeof cipher_lists[0])];
            result = sk_tls_settings_set_cipher_list(settings, list);
            bad_cipher = !openssl_accepts_list(list) || lowers_level(list);
            level_above_key = raises_above_the_keys_level(list);
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " ciphers(%s)", list);
            break;
        }
        case 2: {
            static const char *paths[] = {NULL, "/nonexistent-dir/keys.log", "/", "/proc/version", "%s/keys.log", "%s"};
            const char *pattern = paths[fz_u8(input) % 6];
            char path[256];
            if (pattern) snprintf(path, sizeof path, pattern, temp_directory);
            result = sk_tls_settings_set_key_log_file(settings, pattern ? path : NULL);
            bad_key_log = pattern && !key_log_opens(path);
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " key-log(%s)", pattern ? path : "NULL");
            break;
        }
        case 3: {
            /* The certificate as PEM text, whole, cut, or with a NUL inside. */
            static char pem[8192];
            FILE *file = fopen(cert_file, "r");
            size_t length = file ? fread(pem, 1, sizeof pem - 1, file) : 0;
            if (file) fclose(file);
            uint8_t kind = fz_u8(input) % 4;
            if (kind == 1 && length > 40) length = fz_range(input, 1, length - 30);
            int nul = (kind == 2 && length > 10) || kind == 3;
            if (kind == 2 && nul) pem[fz_range(input, 1, length - 2)] = 0;
            if (kind == 3) {
                /* The whole certificate, then a NUL and more: OpenSSL would read the part
                 * before the NUL, a valid certificate, and never see the rest. */
                memcpy(pem + length, "\0-----BEGIN GARBAGE-----", 25);
                length += 25;
            }
            result = sk_tls_settings_set_certificate_chain_pem(settings, pem, length);
            has_certificate = 1;
            bad_certificate = kind != 0;
            bad_pem = nul;
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " certificate-pem(%s)",
                                     kind == 0 ? "whole" : kind == 1 ? "cut" : kind == 2 ? "NUL inside" : "NUL after");
            break;
        }
        case 4: {
            int good = fz_u8(input) % 4 != 0;
            result = sk_tls_settings_set_certificate_chain_file(settings, good ? cert_file : key_file);
            has_certificate = 1;
            bad_certificate = !good;
            bad_pem = 0;   /* the file replaces PEM text given before */
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " certificate-file(%s)", good ? "good" : "key");
            break;
        }
        case 5: {
            int good = fz_u8(input) % 4 != 0;
            result = sk_tls_settings_set_private_key_file(settings, good ? key_file : "/nonexistent.pem", NULL);
            has_key = 1;
            bad_key = !good;
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " key-file(%s)", good ? "good" : "missing");
            break;
        }
        case 6: {
            static const int versions[] = {0, 0x0301, 0x0302, 0x0303, 0x0304, 0x0305, -1, 0x0300};
            int low = versions[fz_u8(input) % 8], high = versions[fz_u8(input) % 8];
            result = sk_tls_settings_set_versions(settings, low, high);
            /* A maximum below the minimum (TLS 1.2 when not given) is refused by the setter. */
            int valid = (low == 0 || (low >= 0x0301 && low <= 0x0304)) && (high == 0 || (high >= 0x0301 && high <= 0x0304)) &&
                        !(high && high < (low ? low : 0x0303));
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "versions %#x %#x: %s", low, high, fz_error_name(result));
            if (valid) {
                minimum = low;
                maximum = high;
            }
            bad_versions = minimum && maximum && maximum < minimum;
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " versions(%#x,%#x)", low, high);
            result = SK_OK;
            break;
        }
        case 7: {
            int value = (int)fz_u8(input) % 6 - 2;
            result = sk_tls_settings_set_verification(settings, value);
            int valid = value >= -1 && value <= 2;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "verification %d: %s", value, fz_error_name(result));
            if (valid) client_requires = role == SK_TLS_CLIENT && value == SK_TLS_VERIFY_REQUIRE_CERTIFICATE;
            used += (size_t)snprintf(context_line + used, sizeof context_line - used, " verification(%d)", value);
            result = SK_OK;
            break;
        }
        case 8: {
            double seconds = fz_timeout(input);
            result = sk_tls_settings_set_handshake_timeout(settings, seconds);
            FZ_CHECK(result == (isnan(seconds) ? SK_ERR_BAD_PARAM : SK_OK), "handshake timeout %g: %s", seconds,
                     fz_error_name(result));
            result = SK_OK;
            break;
        }
        default: {
            static char long_name[300];
            memset(long_name, 'p', sizeof long_name - 1);
            const char *protocols[] = {"h2", "", long_name + 299 - 255, long_name + 299 - 256, "http/1.1"};
            size_t first = fz_u8(input) % 5, count = fz_range(input, 0, 5 - first);
            result = sk_tls_settings_set_alpn_protocols(settings, protocols + first, count);
            int valid = 1;
            for (size_t i = first; i < first + count; i++) valid = valid && strlen(protocols[i]) >= 1 && strlen(protocols[i]) <= 255;
            FZ_CHECK(result == (valid ? SK_OK : SK_ERR_BAD_PARAM), "alpn (%zu from %zu): %s", count, first, fz_error_name(result));
            result = SK_OK;
            break;
        }
        }
        FZ_CHECK(result == SK_OK, "%s: the setter refused: %s", context_line, fz_error_name(result));
    }
    (void)bad_trust;
    int server_incomplete = role == SK_TLS_SERVER && (!has_certificate || !has_key);
    /* Not decided by the header: a client with half of a certificate and key; TLS 1.0 and
     * 1.1 (OpenSSL 3 refuses them below security level 1, at the handshake or earlier). */
    int undecided = (role == SK_TLS_CLIENT && has_certificate != has_key) || (maximum && maximum < 0x0303) ||
                    (minimum && minimum < 0x0303);
    int effective_minimum = minimum ? minimum : 0x0303, effective_maximum = maximum ? maximum : 0x0304;
    bad_versions = effective_maximum < effective_minimum;
    /* "Clients must send a certificate" is a server's setting. */
    int refuse = client_requires || empty_peer_name || bad_cipher || bad_key_log || bad_pem || bad_versions || server_incomplete ||
                 (has_certificate && bad_certificate) || (has_key && bad_key) || (has_key && !has_certificate) ||
                 (has_certificate && level_above_key);
    sk_error_t error;
    int result = sk_tls_settings_check(settings, &error);
    if (undecided) {
        /* Any answer but a crash. */
    } else if (refuse) {
        FZ_CHECK(result == SK_ERR_TLS_SETTINGS, "%s: check gave %s, the model refuses it", context_line, fz_error_name(result));
        if (bad_key_log && !client_requires && !empty_peer_name && !bad_cipher && !bad_pem && !bad_versions && !server_incomplete &&
            !bad_certificate && !bad_key) {
            FZ_CHECK(error.os_error != 0, "%s: a key-log file that cannot be opened, without its errno", context_line);
        }
    } else if (role == SK_TLS_CLIENT || (has_certificate && has_key)) {
        FZ_CHECK(result == SK_OK, "%s: check refused what the model accepts: %s (%s)", context_line, fz_error_name(result),
                 error.message);
    }
    sk_tls_settings_release(settings);
}

/* ---- PROXY protocol headers ---------------------------------------------------------------------- */

/* The model: what a listener with `mode` makes of a connection whose whole input is `data`
 * (then FIN): accepted with the header's addresses (PROXY_COMPLETE), or closed. Written from
 * the specification (haproxy.org/download/2.6/doc/proxy-protocol.txt) and the header's
 * stated limits, apart from the engine's parser. */
enum { PROXY_CLOSED = 0, PROXY_COMPLETE = 1 };
typedef struct {
    int verdict;
    size_t length;
    int version;
    int keeps_real;
    struct sockaddr_storage source, destination;
    socklen_t source_length, destination_length;
} proxy_model_t;

static const unsigned char proxy_signature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

static int model_port(const char *text, size_t length, uint16_t *out) {
    if (length < 1 || length > 5 || (length > 1 && text[0] == '0')) return 0;
    long value = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
        value = value * 10 + (text[i] - '0');
    }
    if (value > 65535) return 0;
    *out = (uint16_t)value;
    return 1;
}

static int model_ip(const char *text, size_t length, int family, uint16_t port, struct sockaddr_storage *out,
                    socklen_t *out_length) {
    char copy[64];
    if (length >= sizeof copy) return 0;
    memcpy(copy, text, length);
    copy[length] = 0;
    memset(out, 0, sizeof *out);
    if (family == AF_INET) {
        struct sockaddr_in *address = (struct sockaddr_in *)out;
        address->sin_family = AF_INET;
        address->sin_port = htons(port);
        *out_length = sizeof *address;
        return inet_pton(AF_INET, copy, &address->sin_addr) == 1;
    }
    struct sockaddr_in6 *address = (struct sockaddr_in6 *)out;
    address->sin6_family = AF_INET6;
    address->sin6_port = htons(port);
    *out_length = sizeof *address;
    return inet_pton(AF_INET6, copy, &address->sin6_addr) == 1;
}

static void model_v1(const unsigned char *data, size_t size, proxy_model_t *model) {
    if (size < 6 || memcmp(data, "PROXY ", 6) != 0) return;
    size_t cr = 0;
    while (cr < size && cr < 107 && data[cr] != '\r') cr++;
    if (cr >= size || cr >= 107 || cr + 2 > 107 || cr + 1 >= size || data[cr + 1] != '\n') return;
    if (memchr(data, 0, cr)) return;
    /* Fields between single spaces: exactly five, or UNKNOWN first (the rest ignored). */
    const char *fields[6];
    size_t lengths[6], count = 0, start = 6;
    for (size_t i = 6; i <= cr; i++) {
        if (i == cr || data[i] == ' ') {
            if (count < 6) {
                fields[count] = (const char *)data + start;
                lengths[count] = i - start;
            }
            count++;
            start = i + 1;
        }
    }
    model->length = cr + 2;
    model->version = 1;
    if (lengths[0] == 7 && memcmp(fields[0], "UNKNOWN", 7) == 0) {
        model->verdict = PROXY_COMPLETE;
        model->keeps_real = 1;
        return;
    }
    int family;
    if (lengths[0] == 4 && memcmp(fields[0], "TCP4", 4) == 0) family = AF_INET;
    else if (lengths[0] == 4 && memcmp(fields[0], "TCP6", 4) == 0) family = AF_INET6;
    else return;
    uint16_t source_port, destination_port;
    if (count != 5 || !model_port(fields[3], lengths[3], &source_port) || !model_port(fields[4], lengths[4], &destination_port))
        return;
    if (!model_ip(fields[1], lengths[1], family, source_port, &model->source, &model->source_length) ||
        !model_ip(fields[2], lengths[2], family, destination_port, &model->destination, &model->destination_length))
        return;
    model->verdict = PROXY_COMPLETE;
}

static socklen_t model_unix(const unsigned char *path, struct sockaddr_storage *out) {
    struct sockaddr_un *address = (struct sockaddr_un *)out;
    memset(out, 0, sizeof *out);
    address->sun_family = AF_UNIX;
    size_t length = 108;
    if (path[0] == 0) {
        while (length > 1 && path[length - 1] == 0) length--;
    } else {
        const unsigned char *nul = memchr(path, 0, 108);
        if (nul) length = (size_t)(nul - path);
    }
    memcpy(address->sun_path, path, length);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length);
}

/* CRC32C (Castagnoli, reflected 0x82F63B78), bit by bit, with the 4 bytes at `zero` taken
 * as zeros (SIZE_MAX: none). */
static uint32_t model_crc32c(const unsigned char *data, size_t size, size_t zero) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; i++) {
        crc ^= (zero != SIZE_MAX && i >= zero && i < zero + 4) ? 0 : data[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

/* The TLVs of a whole v2 header from `start` (2.2.5 and 2.2.7): each type, 16-bit length and
 * value inside the header, and a CRC32C TLV of 4 bytes equal to the header's checksum with
 * its value zeroed (a receiver MUST verify it). */
static int model_tlvs_ok(const unsigned char *header, size_t length, size_t start) {
    for (size_t at = start; at < length;) {
        if (at + 3 > length) return 0;
        size_t value = at + 3, value_length = (size_t)header[at + 1] << 8 | header[at + 2];
        if (value + value_length > length) return 0;
        if (header[at] == 0x03) {
            if (value_length != 4) return 0;
            uint32_t sent = (uint32_t)header[value] << 24 | (uint32_t)header[value + 1] << 16 |
                            (uint32_t)header[value + 2] << 8 | header[value + 3];
            if (sent != model_crc32c(header, length, value)) return 0;
        }
        at = value + value_length;
    }
    return 1;
}

static void model_v2(const unsigned char *data, size_t size, proxy_model_t *model) {
    if (size < 16 || memcmp(data, proxy_signature, 12) != 0) return;
    int command = data[12] & 0x0F, family = data[13] >> 4, transport = data[13] & 0x0F;
    size_t length = 16 + ((size_t)data[14] << 8 | data[15]);
    if (data[12] >> 4 != 2 || command > 1 || length > 16 + 2048 || family > 3 || transport > 2 || size < length) return;
    model->length = length;
    model->version = 2;
    /* The TLVs follow the family's addresses (none when a LOCAL header's block is shorter). */
    size_t addresses = family == 0 ? 0 : family == 1 ? 12 : family == 2 ? 36 : 216;
    if (16 + addresses <= length && !model_tlvs_ok(data, length, 16 + addresses)) return;
    if (command == 0 || family == 0 || transport == 0) {
        model->verdict = PROXY_COMPLETE;
        model->keeps_real = 1;
        return;
    }
    const unsigned char *block = data + 16;
    size_t needed = family == 1 ? 12 : family == 2 ? 36 : 216;
    if (transport != 1 || length - 16 < needed) return;
    if (family == 1) {
        struct sockaddr_in *source = (struct sockaddr_in *)&model->source, *destination = (struct sockaddr_in *)&model->destination;
        memset(&model->source, 0, sizeof model->source);
        memset(&model->destination, 0, sizeof model->destination);
        source->sin_family = destination->sin_family = AF_INET;
        memcpy(&source->sin_addr, block, 4);
        memcpy(&destination->sin_addr, block + 4, 4);
        memcpy(&source->sin_port, block + 8, 2);
        memcpy(&destination->sin_port, block + 10, 2);
        model->source_length = model->destination_length = sizeof(struct sockaddr_in);
    } else if (family == 2) {
        struct sockaddr_in6 *source = (struct sockaddr_in6 *)&model->source,
                            *destination = (struct sockaddr_in6 *)&model->destination;
        memset(&model->source, 0, sizeof model->source);
        memset(&model->destination, 0, sizeof model->destination);
        source->sin6_family = destination->sin6_family = AF_INET6;
        memcpy(&source->sin6_addr, block, 16);
        memcpy(&destination->sin6_addr, block + 16, 16);
        memcpy(&source->sin6_port, block + 32, 2);
        memcpy(&destination->sin6_port, block + 34, 2);
        model->source_length = model->destination_length = sizeof(struct sockaddr_in6);
    } else {
        model->source_length = model_unix(block, &model->source);
        model->destination_length = model_unix(block + 108, &model->destination);
    }
    model->verdict = PROXY_COMPLETE;
}

static proxy_model_t proxy_model(int mode, const unsigned char *data, size_t size) {
    proxy_model_t model;
    memset(&model, 0, sizeof model);
    if (size == 0) return model;
    if (mode == SK_PROXY_PROTOCOL_V1 || (mode == SK_PROXY_PROTOCOL_EITHER && data[0] == 'P')) model_v1(data, size, &model);
    else if (mode == SK_PROXY_PROTOCOL_V2 || (mode == SK_PROXY_PROTOCOL_EITHER && data[0] == '\r')) model_v2(data, size, &model);
    return model;
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    sk_socket_t *accepted;
    int accepts;
    unsigned char read[512];
    size_t read_length;
    int read_done;
    /* Taken in did_accept, before the connection starts: the client's FIN may end it at
     * once afterwards, and its addresses with it. */
    struct sockaddr_storage peer, local;
    socklen_t peer_length, local_length;
    int has_peer, has_local, version;
    size_t rest; /* bytes expected after the header: read queued in did_accept */
} proxy_state_t;

static proxy_state_t proxy_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void proxy_did_accept(sk_socket_t *listener, sk_socket_t *new_socket, void *userdata) {
    (void)listener;
    (void)userdata;
    pthread_mutex_lock(&proxy_state.lock);
    if (proxy_state.accepted) {
        sk_socket_release(new_socket); /* a second one: counted, not kept */
    } else {
        proxy_state.accepted = new_socket;
        proxy_state.peer_length = proxy_state.local_length = sizeof proxy_state.peer;
        proxy_state.has_peer =
            sk_socket_get_connected_address(new_socket, (struct sockaddr *)&proxy_state.peer, &proxy_state.peer_length) > 0;
        proxy_state.has_local =
            sk_socket_get_local_address(new_socket, (struct sockaddr *)&proxy_state.local, &proxy_state.local_length) > 0;
        proxy_state.version = sk_socket_get_proxy_protocol_version(new_socket);
        sk_error_t error;
        if (proxy_state.rest > 0) sk_socket_read_to_length(new_socket, proxy_state.rest, 10, 1, &error);
    }
    proxy_state.accepts++;
    pthread_cond_broadcast(&proxy_state.changed);
    pthread_mutex_unlock(&proxy_state.lock);
}

static void proxy_did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)sock;
    (void)tag;
    (void)userdata;
    pthread_mutex_lock(&proxy_state.lock);
    if (length <= sizeof proxy_state.read) memcpy(proxy_state.read, data, length);
    proxy_state.read_length = length;
    proxy_state.read_done = 1;
    pthread_cond_broadcast(&proxy_state.changed);
    pthread_mutex_unlock(&proxy_state.lock);
}

static void make_proxy_input(fz_input_t *input, unsigned char *data, size_t *size) {
    size_t used = 0;
    switch (fz_u8(input) % 6) {
    case 0: break; /* raw bytes only */
    case 1: {
        static const char *const lines[] = {"PROXY TCP4 192.0.2.1 198.51.100.2 1234 443\r\n",
                                            "PROXY TCP6 2001:db8::1 ::1 65535 0\r\n", "PROXY UNKNOWN\r\n", "PROXY "};
        const char *line = lines[fz_u8(input) % 4];
        memcpy(data, line, strlen(line));
        used = strlen(line);
        break;
    }
    default: {
        static const unsigned char families[] = {0x11, 0x21, 0x31, 0x00, 0x12};
        memcpy(data, proxy_signature, 12);
        data[12] = fz_u8(input) % 4 ? 0x21 : 0x20;
        data[13] = families[fz_u8(input) % 5];
        size_t block = data[13] == 0x11 ? 12 : data[13] == 0x21 ? 36 : data[13] == 0x31 ? 216 : 0;
        block += fz_u8(input) % 4 == 0 ? fz_range(input, 0, 40) : 0; /* TLVs, or junk */
        int crc = fz_u8(input) % 3 == 0; /* a CRC32C TLV last, right (until mutated) */
        size_t length = block + (crc ? 7 : 0);
        data[14] = (unsigned char)(length >> 8);
        data[15] = (unsigned char)(length & 0xFF);
        for (size_t i = 0; i < block; i++) data[16 + i] = fz_u8(input);
        used = 16 + length;
        if (crc) {
            unsigned char *tlv = data + 16 + block;
            tlv[0] = 0x03;
            tlv[1] = 0;
            tlv[2] = 4;
            uint32_t value = model_crc32c(data, used, (size_t)(tlv + 3 - data));
            for (int i = 0; i < 4; i++) tlv[3 + i] = (unsigned char)(value >> (24 - 8 * i));
        }
        break;
    }
    }
    /* Mutations: a byte here and there, then raw bytes after. */
    for (int flips = fz_u8(input) % 4 == 0 ? (int)fz_range(input, 1, 3) : 0; flips > 0 && used > 0; flips--)
        data[fz_range(input, 0, used - 1)] = fz_u8(input);
    if (fz_u8(input) % 4 == 0 && used > 0) used = fz_range(input, 0, used); /* cut short */
    for (size_t extra = fz_range(input, 0, 32); extra > 0 && used < 400; extra--) data[used++] = fz_u8(input);
    *size = used;
}

static int address_equal(const struct sockaddr_storage *a, socklen_t a_length, const struct sockaddr_storage *b,
                         socklen_t b_length) {
    return a_length == b_length && memcmp(a, b, a_length) == 0;
}

static void op_proxy_header(fz_input_t *input) {
    int mode = 1 + fz_u8(input) % 3;
    unsigned char data[400];
    size_t size;
    make_proxy_input(input, data, &size);
    proxy_model_t model = proxy_model(mode, data, size);
    snprintf(context_line, sizeof context_line, "PROXY header, mode %d, %zu bytes (model: %s, length %zu)", mode, size,
             model.verdict == PROXY_COMPLETE ? "accepted" : "closed", model.length);
    pthread_mutex_lock(&proxy_state.lock);
    proxy_state.rest = model.verdict == PROXY_COMPLETE ? size - model.length : 0;
    pthread_mutex_unlock(&proxy_state.lock);
    sk_socket_delegate_t delegate = {0};
    delegate.did_accept = proxy_did_accept;
    delegate.did_read = proxy_did_read;
    sk_socket_t *listener = NULL;
    FZ_CHECK(sk_socket_create(&delegate, sizeof delegate, NULL, NULL, group, &listener, NULL) == SK_OK, "create");
    sk_error_t error;
    FZ_CHECK(sk_socket_set_proxy_protocol(listener, mode) == SK_OK, "mode");
    FZ_CHECK(sk_socket_set_proxy_header_timeout(listener, 10, &error) == SK_OK, "timeout");
    FZ_CHECK(sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error) == SK_OK, "listen: %s", error.message);
    uint16_t port = 0;
    sk_socket_get_local_port(listener, &port);
    int client = -1;
    FZ_CHECK(fz_tcp_connect_to(port, &client) == 0, "connect");
    /* In up to three writes: a header split across segments waits for its rest. */
    double deadline = fz_now() + 10;
    size_t sent = 0;
    for (int part = 0; part < 3 && sent < size; part++) {
        size_t chunk = part == 2 ? size - sent : fz_range(input, 1, size - sent);
        size_t written = fz_send_all(client, data + sent, chunk, deadline);
        sent += written;
        /* A listener that refused what came so far may have closed (a reset) already. */
        if (written < chunk) {
            FZ_CHECK(model.verdict != PROXY_COMPLETE, "%s: send failed (errno %d)", context_line, errno);
            break;
        }
    }
    shutdown(client, SHUT_WR);
    struct sockaddr_storage real;
    socklen_t real_length = sizeof real;
    getsockname(client, (struct sockaddr *)&real, &real_length);

    pthread_mutex_lock(&proxy_state.lock);
    if (model.verdict == PROXY_COMPLETE) {
        while (proxy_state.accepts == 0 && fz_cond_wait_until(&proxy_state.changed, &proxy_state.lock, deadline)) {}
        pthread_mutex_unlock(&proxy_state.lock);
        FZ_CHECK(proxy_state.accepts == 1, "%s: not accepted within 10 s", context_line);
        FZ_CHECK(proxy_state.has_peer, "%s: no peer address in did_accept", context_line);
        if (model.keeps_real) {
            FZ_CHECK(address_equal(&proxy_state.peer, proxy_state.peer_length, &real, real_length), "%s: not the real peer",
                     context_line);
            FZ_CHECK(proxy_state.version == 0, "%s: version %d", context_line, proxy_state.version);
        } else {
            FZ_CHECK(address_equal(&proxy_state.peer, proxy_state.peer_length, &model.source, model.source_length),
                     "%s: source differs", context_line);
            FZ_CHECK(proxy_state.has_local && address_equal(&proxy_state.local, proxy_state.local_length,
                                                            &model.destination, model.destination_length),
                     "%s: destination differs", context_line);
            FZ_CHECK(proxy_state.version == model.version, "%s: version %d", context_line, proxy_state.version);
        }
        /* Not a byte after the header lost, none of the header read (the read was queued
         * in did_accept). */
        size_t rest = size - model.length;
        if (rest > 0) {
            pthread_mutex_lock(&proxy_state.lock);
            while (!proxy_state.read_done && fz_cond_wait_until(&proxy_state.changed, &proxy_state.lock, deadline)) {}
            pthread_mutex_unlock(&proxy_state.lock);
            FZ_CHECK(proxy_state.read_done && proxy_state.read_length == rest &&
                         memcmp(proxy_state.read, data + model.length, rest) == 0,
                     "%s: the %zu bytes after the header differ", context_line, rest);
        }
    } else {
        pthread_mutex_unlock(&proxy_state.lock);
        /* Closed by the listener: an end of stream or a reset, and nothing accepted. */
        char scratch[512];
        int closed = 0;
        while (!closed && fz_now() < deadline) {
            struct pollfd descriptor = {.fd = client, .events = POLLIN};
            if (poll(&descriptor, 1, 100) != 1) continue;
            ssize_t got = recv(client, scratch, sizeof scratch, 0);
            closed = got == 0 || (got < 0 && errno == ECONNRESET);
        }
        FZ_CHECK(closed, "%s: not closed within 10 s", context_line);
        pthread_mutex_lock(&proxy_state.lock);
        int accepts = proxy_state.accepts;
        pthread_mutex_unlock(&proxy_state.lock);
        FZ_CHECK(accepts == 0, "%s: accepted", context_line);
    }
    close(client);
    sk_socket_release(listener);
    pthread_mutex_lock(&proxy_state.lock);
    if (proxy_state.accepted) sk_socket_release(proxy_state.accepted);
    proxy_state.accepted = NULL;
    proxy_state.accepts = 0;
    proxy_state.read_done = 0;
    proxy_state.read_length = 0;
    pthread_mutex_unlock(&proxy_state.lock);
}

/* ---- Setup ---------------------------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_context_printer = print_context;
    fz_certificate_paths("parse_fuzzer", cert_file, key_file);
    snprintf(temp_directory, sizeof temp_directory, "/tmp/sk-parse-fuzz-%d", (int)getpid());
    mkdir(temp_directory, 0700);
    fz_cond_init(&proxy_state.changed);
    if (sk_loop_group_create(1, &group, NULL) != SK_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_input_t input;
    fz_input_init(&input, data, size);
    for (int op = 0; op < 16 && !fz_input_empty(&input); op++) {
        switch (fz_u8(&input) % 8) {
        case 7: op_proxy_header(&input); break;
        case 6: op_unix_address(&input); break;
        case 0: op_address(&input); break;
        case 1: op_lookup(&input); break;
        case 2: op_interface(&input); break;
        case 3: op_tcp_setters(&input); break;
        case 4: op_udp_setters(&input); break;
        default: op_tls(&input); break;
        }
    }
    return 0;
}
