/*
 * readback.h -- the router's read-back path, pure C (no Python): segment
 * records (drawn in layouts.h, with the message header and the frame) to their
 * fields, and messages to NSQ message frames.  The bindings are in readback.c
 * (the Message type, read_messages, pack_frames) and the pure-Python twin is
 * nsqmp/router/pyreadback.py (same API, same results: the tests compare them).
 *
 * Records are trusted (an acceptor wrote and checksummed them): the CRC is not
 * verified here.  Every read stays inside the buffer given.
 *
 * Prefix NQB_ / nqb_ (ring.h has NQB_).
 */
#ifndef NSQMP_READBACK_H
#define NSQMP_READBACK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "layouts.h"
#include "publish.h"


static inline uint64_t
nqb_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t
nqb_u64be(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline void
nqb_put_u32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* One record's fields; pointers into the buffer parsed. */
typedef struct {
    size_t size;          /* whole record: NQL_RECORD_HEAD + length */
    int64_t due;          /* due time (ns) of a DEFER record, else 0 */
    int64_t ts;           /* timestamp (ns) */
    const uint8_t *id;    /* NQL_ID bytes */
    const uint8_t *body;
    size_t body_len;
} nqb_record;

#define NQB_OK 0
#define NQB_PARTIAL 1         /* no whole record before the end of the buffer */
#define NQB_EMPTY (-1)        /* a length word of 0: no record here */
#define NQB_SHORT (-2)        /* length shorter than the message header (+ due) */

/* Parse the record at buf[pos] (buf holds len bytes, pos <= len).  Checks, in
 * this order: a whole length word, length 0, a length too short for the
 * message header, a whole record. */
static inline int
nqb_parse(const uint8_t *buf, size_t len, size_t pos, nqb_record *r)
{
    if (pos > len || len - pos < NQL_RECORD_HEAD)
        return NQB_PARTIAL;
    uint32_t word = nqe_u32le(buf + pos);
    size_t length = word & NQL_LENGTH_MASK;
    int deferred = (word & NQL_DEFER) != 0;
    if (length == 0)
        return NQB_EMPTY;
    if (length < (size_t)NQL_MESSAGE_HEAD + (deferred ? NQL_DUE : 0))
        return NQB_SHORT;
    if (len - pos - NQL_RECORD_HEAD < length)
        return NQB_PARTIAL;
    const uint8_t *m = buf + pos + NQL_RECORD_HEAD;
    r->size = NQL_RECORD_HEAD + length;
    r->due = 0;
    if (deferred) {
        r->due = (int64_t)nqb_u64le(m);
        m += NQL_DUE;
        length -= NQL_DUE;
    }
    r->ts = (int64_t)nqb_u64be(m);
    r->id = m + NQL_ID_AT;
    r->body = m + NQL_MESSAGE_HEAD;
    r->body_len = length - NQL_MESSAGE_HEAD;
    return NQB_OK;
}

/* Write one message frame at dst (NQL_MESSAGE_FRAME_HEAD + body_len bytes of room;
 * the caller checked body_len <= INT32_MAX - 4 - NQL_MESSAGE_HEAD). */
static inline void
nqb_put_frame(uint8_t *dst, int64_t ts, uint16_t attempts, const uint8_t *id,
              const uint8_t *body, size_t body_len)
{
    nqb_put_u32be(dst, (uint32_t)(4 + NQL_MESSAGE_HEAD + body_len));
    nqb_put_u32be(dst + 4, NQL_FRAME_MESSAGE);
    nqe_put_u64be(dst + NQL_FRAME_HEAD, (uint64_t)ts);
    dst[NQL_FRAME_HEAD + NQL_ATTEMPTS_AT] = (uint8_t)(attempts >> 8);
    dst[NQL_FRAME_HEAD + NQL_ATTEMPTS_AT + 1] = (uint8_t)attempts;
    memcpy(dst + NQL_FRAME_HEAD + NQL_ID_AT, id, NQL_ID);
    memcpy(dst + NQL_MESSAGE_FRAME_HEAD, body, body_len);
}

#endif
