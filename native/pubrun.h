/*
 * pubrun.h -- the publish run's core, shared by pub_run (pubrun.c) and the
 * segment tail (segtail.c): frame, check, stamp and encode the PUB/MPUB
 * commands of a read buffer into a scratch buffer of segment records, then
 * write them.  pubrun.c's header comment gives the rules.
 */
#ifndef NSQMP_PUBRUN_H
#define NSQMP_PUBRUN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define PR_EPOCH_MS 1288834974657LL  /* nsqmp/protocol/ids.py's _EPOCH_MS (Twitter's) */
#define PR_SEQ_MAX 0x1000            /* ids per millisecond */
#define PR_MAX_OUT (1u << 20)        /* bytes encoded per call at most (the kept scratch buffer too) */
#define PR_MAPPED_MAX 4096           /* a run's records copied into the window at most (else pwrite) */

/* why a run stopped */
#define PR_END 0    /* the buffer ends after the last command taken */
#define PR_MORE 1   /* the next command is not all here yet */
#define PR_OTHER 2  /* the next command is not one the run takes */
#define PR_ROOM 3   /* the next command's records do not fit in room (or the call's limit) */

typedef struct {
    uint8_t *out;       /* the records encoded so far */
    size_t len, cap;
    int64_t ts;
    int64_t ms;         /* id generator: millisecond (since the epoch) and sequence */
    int64_t seq;
    uint64_t node;
    size_t limit;       /* most bytes of records this call may write */
} Run;

typedef struct {
    const uint8_t *topic;
    Py_ssize_t tlen;
    int64_t max_msg, max_body;
} Limits;

typedef struct {
    Py_ssize_t end;     /* where the first command not taken starts */
    long long commands, messages;
    int status;         /* PR_END, PR_MORE, PR_OTHER or PR_ROOM */
} Taken;

/* The process's scratch run, emptied and set up for a call: stamped ts_ns, ids from
 * the generator state (ms, seq) (a later millisecond restarts the sequence), at most
 * room bytes.  One per process: callers hold the GIL from here to their write. */
Run *pr_start(int64_t ts_ns, long long node, long long ms, long long seq, long long room);

/* Take the commands from data[pos:len) into r. */
Taken pr_take(Run *r, const Limits *lim, const uint8_t *data, Py_ssize_t len, Py_ssize_t pos);

/* pwrite all of p at `at`; -1 with errno set if it fails. */
int pr_write_all(int fd, const uint8_t *p, size_t n, int64_t at);

#endif
