// SPDX-License-Identifier: MIT
// loopback_echo.cpp - a C++ program built by CMake against SocketKit::socketkit: a listener
// on 127.0.0.1 (port from the kernel) echoes one line to a client, which checks it. Exits 0
// when the line came back, 1 otherwise (within 10 seconds).
#include <socketkit.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace {

std::mutex mutex;
std::condition_variable changed;
std::string echoed;
bool finished = false;
sk_socket_t *listener = nullptr;

void server_did_accept(sk_socket_t *, sk_socket_t *connection, void *) {
    sk_socket_read_to_data(connection, SK_LF, 1, 1024, 5, 0, nullptr);
}

void server_did_read(sk_socket_t *sock, const void *data, size_t length, long, void *) {
    sk_socket_write(sock, data, length, 5, 0, nullptr);
}

void server_did_disconnect(sk_socket_t *sock, const sk_error_t *, void *) {
    // The client closes once it has its echo (SK_ERR_CLOSED here).
    if (sock != listener) sk_socket_release(sock);  // an accepted connection: ours to release
}

void client_did_connect(sk_socket_t *sock, const char *, uint16_t, void *) {
    static const char line[] = "hello from CMake\n";
    sk_socket_write(sock, line, sizeof line - 1, 5, 0, nullptr);
    sk_socket_read_to_data(sock, SK_LF, 1, 1024, 5, 0, nullptr);
}

void client_did_read(sk_socket_t *sock, const void *data, size_t length, long, void *) {
    {
        std::lock_guard<std::mutex> lock(mutex);
        echoed.assign(static_cast<const char *>(data), length);
    }
    sk_socket_disconnect(sock);
}

void client_did_disconnect(sk_socket_t *, const sk_error_t *error, void *) {
    if (error) std::fprintf(stderr, "client: %s\n", error->message);
    std::lock_guard<std::mutex> lock(mutex);
    finished = true;
    changed.notify_all();
}

}  // namespace

int main() {
    if (sk_version_number() < SK_VERSION_NUMBER) {
        std::fprintf(stderr, "library %s is older than the header %s\n", sk_version(), SK_VERSION_STRING);
        return 1;
    }
    sk_error_t error;
    sk_socket_delegate_t server{};
    server.did_accept = server_did_accept;
    server.did_read = server_did_read;
    server.did_disconnect = server_did_disconnect;
    if (sk_socket_create(&server, sizeof server, nullptr, nullptr, nullptr, &listener, &error) != SK_OK
        || sk_socket_accept_on_interface(listener, "127.0.0.1", 0, &error) != SK_OK) {
        std::fprintf(stderr, "listen: %s\n", error.message);
        return 1;
    }
    uint16_t port = 0;
    sk_socket_get_local_port(listener, &port);

    sk_socket_delegate_t client{};
    client.did_connect = client_did_connect;
    client.did_read = client_did_read;
    client.did_disconnect = client_did_disconnect;
    sk_socket_t *sock = nullptr;
    if (sk_socket_create(&client, sizeof client, nullptr, nullptr, nullptr, &sock, &error) != SK_OK
        || sk_socket_connect_to_host(sock, "127.0.0.1", port, nullptr, 5, &error) != SK_OK) {
        std::fprintf(stderr, "connect: %s\n", error.message);
        return 1;
    }
    bool done;
    {
        std::unique_lock<std::mutex> lock(mutex);
        done = changed.wait_for(lock, std::chrono::seconds(10), [] { return finished; });
    }
    sk_socket_release(sock);
    sk_socket_release(listener);
    if (!done || echoed != "hello from CMake\n") {
        std::fprintf(stderr, "loopback_echo: got \"%s\"\n", echoed.c_str());
        return 1;
    }
    std::printf("loopback_echo: SocketKit %s echoed a line through SocketKit::socketkit\n", sk_version());
    return 0;
}
