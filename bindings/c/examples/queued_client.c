/* SPDX-License-Identifier: MIT */
/*
 * queued_client.c - queue writes and reads before the connection exists.
 *
 *     queued_client HOST PORT [COUNT]
 *
 * Calls connect, then at once queues COUNT requests and COUNT reads, each with its own
 * tag, and finally disconnect-after-reading-and-writing: SocketKit runs them in order once
 * connected and closes when both queues are empty. Callbacks run on a serial callback
 * queue (a thread of SocketKit's); the main thread waits on a condition variable.
 *
 *     cc queued_client.c $(pkg-config --cflags --libs socketkit) -o queued_client
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <socketkit.h>

struct progress {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int done;
    int failed;
};

static void did_write(sk_socket_t *sock, long tag, void *userdata) {
    (void)sock;
    (void)userdata;
    printf("request %ld written\n", tag);
}

static void did_read(sk_socket_t *sock, const void *data, size_t length, long tag, void *userdata) {
    (void)sock;
    (void)userdata;
    printf("reply %ld: %.*s", tag, (int)length, (const char *)data);
}

static void did_disconnect(sk_socket_t *sock, const sk_error_t *error, void *userdata) {
    struct progress *progress = userdata;
    (void)sock;
    if (error) fprintf(stderr, "queued_client: %s\n", error->message);
    pthread_mutex_lock(&progress->lock);
    progress->failed = error != NULL;
    progress->done = 1;
    pthread_cond_signal(&progress->changed);
    pthread_mutex_unlock(&progress->lock);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s HOST PORT [COUNT]\n", argv[0]);
        return 2;
    }
    int count = argc > 3 ? atoi(argv[3]) : 3;
    struct progress progress = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    sk_socket_delegate_t delegate = {0};
    delegate.did_write = did_write;
    delegate.did_read = did_read;
    delegate.did_disconnect = did_disconnect;

    sk_callback_queue_t *queue = NULL;
    sk_socket_t *sock = NULL;
    sk_error_t error;
    if (sk_callback_queue_create_serial("queued-client", &queue, &error) != SK_OK ||
        sk_socket_create(&delegate, sizeof delegate, &progress, queue, NULL, &sock, &error) != SK_OK ||
        sk_socket_connect_to_host(sock, argv[1], (uint16_t)atoi(argv[2]), NULL, 10, &error) != SK_OK) {
        fprintf(stderr, "queued_client: %s\n", error.message);
        return 1;
    }
    for (long tag = 0; tag < count; tag++) {
        char request[64];
        int length = snprintf(request, sizeof request, "request %ld\n", tag);
        sk_socket_write(sock, request, (size_t)length, 10, tag, NULL);
        sk_socket_read_to_data(sock, SK_LF, 1, 1024, 10, tag, NULL);
    }
    sk_socket_disconnect_after_reading_and_writing(sock);

    pthread_mutex_lock(&progress.lock);
    while (!progress.done) pthread_cond_wait(&progress.changed, &progress.lock);
    pthread_mutex_unlock(&progress.lock);
    sk_socket_release(sock);
    sk_callback_queue_release(queue);
    return progress.failed;
}
