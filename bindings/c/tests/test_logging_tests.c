/* SPDX-License-Identifier: MIT */
/*
 * The engine's log (sk_log_set_callback): off by default, a level, a name that does not
 * resolve, replacing the callback from inside it. The TLS failure's record is tested with
 * the TLS tests (tls_failure_is_logged_with_openssls_reason), the accept back-off's with
 * pause_accepting_when_out_of_descriptors.
 */
#include "test_support.h"

/* Connects a new socket to a name that cannot resolve and waits for its end: by then the
 * resolver's record and the connection's are made (both come before did_disconnect). */
static void connect_to_nowhere(const char *host) {
    recorder_t recorder;
    recorder_init(&recorder);
    sk_socket_t *sock = recorded_socket(&recorder, NULL);
    CHECK_EQ(sk_socket_connect_to_host(sock, host, 80, NULL, 15, NULL), SK_OK);
    recorder_expect(&recorder, EVENT_DISCONNECT, 1);
    CHECK_EQ(recorder_event(&recorder, EVENT_DISCONNECT, 0).error_code, SK_ERR_RESOLUTION);
    CHECK_EQ(sk_socket_release(sock), SK_OK);
    recorder_destroy(&recorder);
}

void test_log_reports_a_name_that_does_not_resolve_at_its_level(void) {
    const char *resolver[] = {"\"log-test.invalid\" did not resolve", "resolution", NULL};
    const char *ended[] = {"connecting to log-test.invalid ended", "resolution", NULL};

    /* Off (the default): nothing to call, nothing breaks. */
    connect_to_nowhere("log-test.invalid");

    /* Warnings only: the resolver's record is info, so none comes. */
    log_capture_start(SK_LOG_WARNING);
    connect_to_nowhere("log-test.invalid");
    CHECK_EQ(log_capture_count(), 0);
    log_capture_stop();

    /* Info: the resolver's record, not the connection's end (debug). */
    log_capture_start(SK_LOG_INFO);
    connect_to_nowhere("log-test.invalid");
    if (log_capture_find(SK_LOG_INFO, "resolver", resolver) != 1) log_capture_print();
    CHECK_EQ(log_capture_find(SK_LOG_INFO, "resolver", resolver), 1);
    CHECK_EQ(log_capture_find(SK_LOG_DEBUG, "connection", ended), 0);
    log_capture_stop();

    /* Debug: both. */
    log_capture_start(SK_LOG_DEBUG);
    connect_to_nowhere("log-test.invalid");
    if (log_capture_find(SK_LOG_DEBUG, "connection", ended) != 1) log_capture_print();
    CHECK_EQ(log_capture_find(SK_LOG_INFO, "resolver", resolver), 1);
    CHECK_EQ(log_capture_find(SK_LOG_DEBUG, "connection", ended), 1);
    log_capture_stop();

    /* Off again: the callback is not called. */
    connect_to_nowhere("log-test.invalid");
    CHECK_EQ(log_capture_count(), 0);

    /* The synchronous lookup logs too, on the caller's thread. */
    log_capture_start(SK_LOG_INFO);
    sk_address_t addresses[2];
    CHECK_EQ(sk_lookup_host_addresses("log-test.invalid", 1, addresses, 2, NULL), SK_ERR_RESOLUTION);
    CHECK_EQ(log_capture_find(SK_LOG_INFO, "resolver", resolver), 1);
    log_capture_stop();
}

void test_log_levels_outside_the_enum_are_refused(void) {
    CHECK_EQ(sk_log_set_callback(NULL, -1, NULL), SK_ERR_BAD_PARAM);
    CHECK_EQ(sk_log_set_callback(NULL, SK_LOG_DEBUG + 1, NULL), SK_ERR_BAD_PARAM);
    log_capture_start(SK_LOG_INFO);
    /* A refused level changes nothing: the callback set before still receives. */
    CHECK_EQ(sk_log_set_callback(NULL, 99, NULL), SK_ERR_BAD_PARAM);
    connect_to_nowhere("log-test.invalid");
    CHECK(log_capture_count() >= 1);
    log_capture_stop();
    /* A callback with SK_LOG_OFF turns logging off. */
    log_capture_start(SK_LOG_OFF);
    connect_to_nowhere("log-test.invalid");
    CHECK_EQ(log_capture_count(), 0);
    log_capture_stop();
}

static int self_removing_calls;

static void remove_self(int level, const char *subsystem, const char *message, void *userdata) {
    (void)level;
    (void)subsystem;
    (void)message;
    (void)userdata;
    __atomic_add_fetch(&self_removing_calls, 1, __ATOMIC_SEQ_CST);
    /* From inside the callback: returns at once (it does not wait for this very call). */
    CHECK_EQ(sk_log_set_callback(NULL, SK_LOG_OFF, NULL), SK_OK);
}

void test_log_callback_may_turn_logging_off_from_inside(void) {
    CHECK_EQ(sk_log_set_callback(remove_self, SK_LOG_DEBUG, NULL), SK_OK);
    connect_to_nowhere("log-test.invalid");
    CHECK_EQ(__atomic_load_n(&self_removing_calls, __ATOMIC_SEQ_CST), 1);
    connect_to_nowhere("log-test.invalid");
    CHECK_EQ(__atomic_load_n(&self_removing_calls, __ATOMIC_SEQ_CST), 1);
}
