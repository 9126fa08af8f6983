/*
 * finrun.h -- a FIN record's file accounting, done inside InFlightMap.finish
 * (inflight.c) so a run of FINs costs the router one call, not a Python frame
 * per run of messages of one segment file (pure-Python twin:
 * nsqmp/router/pyinflight.py, finish with `acks`).
 *
 * For each run of consecutive finished messages of one segment (a router
 * Segment, nsqmp/router/topicfiles.py):
 *   - one ack log entry per message appended to the bytearray `acks` when the
 *     channel is durable (channel id != 0), laid out as layouts.h draws it:
 *
 *       0            2            4            8                 16
 *       | channel u16 | acceptor u16 | seq u32 | offset u64        |  (LE)
 *
 *   - segment.refs -= n, and segment.acked += n for a durable channel;
 *   - a segment whose refs this run took from above 0 to 0 or below goes to
 *     the list `drained` (its file may go: TopicFiles.release decides).
 * The Segment is a Python object: its four fields are read by name, once per
 * run, never per message.
 */
#ifndef NSQMP_FINRUN_H
#define NSQMP_FINRUN_H

#include <Python.h>
#include <stdint.h>

#include "layouts.h"

/* entries gathered before they go to acks in one append: an append per entry
 * or a reserve-and-trim per call both cost a realloc per FIN record */
#define FINRUN_BATCH 256

typedef struct {
    PyObject *acks;        /* the bytearray entries go to (borrowed) */
    PyObject *drained;     /* the list of drained segments (borrowed) */
    unsigned channel;      /* the channel id: 0 writes no entries */
    Py_ssize_t used;       /* entries in batch */
    PyObject *segment;     /* the open run's segment (borrowed: a message in
                              the run holds it until finrun_close) or NULL */
    Py_ssize_t count;      /* messages in the open run */
    uint8_t head[8];       /* channel, acceptor, seq of the open run's entries */
    uint8_t batch[FINRUN_BATCH * NQL_ACK_ENTRY];
} finrun_t;

/* Starts the accounting (acks: a bytearray).  -1 with an exception. */
int finrun_open(finrun_t *r, PyObject *acks, PyObject *drained, unsigned channel);

/* Counts a finished message of `segment` (not None) at `offset`. -1 with an
 * exception (the run so far is settled first). */
int finrun_add(finrun_t *r, PyObject *segment, long long offset);

/* Settles the open run and appends the gathered entries to acks, also after an
 * error (which stays the one raised).  -1 with an exception. */
int finrun_close(finrun_t *r);

#endif
