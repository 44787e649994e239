/* Every C test, in one table (see test_main.c). */
#define TEST_LIST(X)                          \
    X(version_matches_the_header)             \
    X(every_error_code_has_a_name)            \
    X(invalid_handles_are_errors)             \
    X(bad_arguments_are_errors)               \
    X(configuration_round_trips)              \
    X(lookup_host_and_address_helpers)        \
    X(echo_with_every_read_variant)           \
    X(callbacks_arrive_in_order_and_end_with_one_disconnect) \
    X(reads_and_writes_queued_before_connect) \
    X(write_no_copy_releases_exactly_once)    \
    X(progress_and_queued_bytes)              \
    X(disconnect_after_writing_delivers_everything) \
    X(disconnect_after_reading_waits_for_reads) \
    X(read_timeout_extends_then_fails)        \
    X(watermarks_follow_a_slow_peer)          \
    X(half_close_keeps_writing_open)          \
    X(peer_reset_is_an_error_not_a_signal)    \
    X(no_callback_after_release)              \
    X(release_inside_own_callback)            \
    X(set_delegate_and_callback_queue)        \
    X(host_queue_runs_callbacks_when_drained) \
    X(serial_queue_runs_callbacks_on_its_thread) \
    X(loop_group_release_closes_its_sockets)  \
    X(loop_group_release_from_its_own_loop)   \
    X(perform_runs_on_the_loop)               \
    X(new_socket_loop_hook_places_connections) \
    X(accept_without_did_accept_closes)       \
    X(connection_refused)                     \
    X(unresolvable_name)                      \
    X(connect_timeout)                        \
    X(port_in_use)                            \
    X(ipv6_loopback)                          \
    X(unix_domain_sockets)                    \
    X(create_from_fd)                         \
    X(pause_accepting_when_out_of_descriptors)
