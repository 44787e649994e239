/* SPDX-License-Identifier: MIT */
/* interpose.h - the descriptor oracle of the C API fuzzer (interpose.c). */
#ifndef INTERPOSE_H
#define INTERPOSE_H

/* Marks `fd` as the harness's own (1) or not (0). */
void interpose_set_canary(int fd, int on);
int interpose_is_canary(int fd);
/* Brackets the harness's own close/write calls on canaries (per thread, nestable). */
void interpose_harness_begin(void);
void interpose_harness_end(void);

#endif
