/*
 * readback.h -- the router's read-back path, pure C (no Python): segment
 * records (as drawn in publish.h, the only drawing of that layout) to their
 * fields, and messages to NSQ message frames.  The bindings are in readback.c
 * (the Message type, read_messages, pack_frames) and the pure-Python twin is
 * nsqmp/router/pyreadback.py (same API, same results: the tests compare them).
 *
 * Records are trusted (an acceptor wrote and checksummed them): the CRC is not
 * verified here.  Every read stays inside the buffer given.
 *
 * NSQ message frame (nsqmp/protocol/frames.py), big-endian:
 *   size i32 = 4 + NQE_MSG_HEAD + body | type i32 = 2 | timestamp i64 |
 *   attempts u16 | id 16 bytes | body
 */
#ifndef NSQMP_READBACK_H
#define NSQMP_READBACK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "publish.h"

#define NQR_ID 16                      /* bytes of a message id */
#define NQR_ID_AT 10                   /* id offset in the message header (after ts, attempts) */
#define NQR_FRAME_HEAD (8 + NQE_MSG_HEAD)  /* frame size + type + message header: 34 */
#define NQR_FRAME_MESSAGE 2
#define NQR_LENGTH_MASK 0x7FFFFFFFu

static inline uint64_t
nqr_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t
nqr_u64be(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline void
nqr_put_u32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* One record's fields; pointers into the buffer parsed. */
typedef struct {
    size_t size;          /* whole record: NQE_HEAD + length */
    int64_t due;          /* due time (ns) of a DEFER record, else 0 */
    int64_t ts;           /* timestamp (ns) */
    const uint8_t *id;    /* NQR_ID bytes */
    const uint8_t *body;
    size_t body_len;
} nqr_record;

#define NQR_OK 0
#define NQR_PARTIAL 1         /* no whole record before the end of the buffer */
#define NQR_EMPTY (-1)        /* a length word of 0: no record here */
#define NQR_SHORT (-2)        /* length shorter than the message header (+ due) */

/* Parse the record at buf[pos] (buf holds len bytes, pos <= len).  Checks, in
 * this order: a whole length word, length 0, a length too short for the
 * message header, a whole record. */
static inline int
nqr_parse(const uint8_t *buf, size_t len, size_t pos, nqr_record *r)
{
    if (pos > len || len - pos < NQE_HEAD)
        return NQR_PARTIAL;
    uint32_t word = nqe_u32le(buf + pos);
    size_t length = word & NQR_LENGTH_MASK;
    int deferred = (word & NQE_DEFER) != 0;
    if (length == 0)
        return NQR_EMPTY;
    if (length < (size_t)NQE_MSG_HEAD + (deferred ? NQE_DUE : 0))
        return NQR_SHORT;
    if (len - pos - NQE_HEAD < length)
        return NQR_PARTIAL;
    const uint8_t *m = buf + pos + NQE_HEAD;
    r->size = NQE_HEAD + length;
    r->due = 0;
    if (deferred) {
        r->due = (int64_t)nqr_u64le(m);
        m += NQE_DUE;
        length -= NQE_DUE;
    }
    r->ts = (int64_t)nqr_u64be(m);
    r->id = m + NQR_ID_AT;
    r->body = m + NQE_MSG_HEAD;
    r->body_len = length - NQE_MSG_HEAD;
    return NQR_OK;
}

/* Write one message frame at dst (NQR_FRAME_HEAD + body_len bytes of room;
 * the caller checked body_len <= INT32_MAX - 4 - NQE_MSG_HEAD). */
static inline void
nqr_put_frame(uint8_t *dst, int64_t ts, uint16_t attempts, const uint8_t *id,
              const uint8_t *body, size_t body_len)
{
    nqr_put_u32be(dst, (uint32_t)(4 + NQE_MSG_HEAD + body_len));
    nqr_put_u32be(dst + 4, NQR_FRAME_MESSAGE);
    nqe_put_u64be(dst + 8, (uint64_t)ts);
    dst[16] = (uint8_t)(attempts >> 8);
    dst[17] = (uint8_t)attempts;
    memcpy(dst + 18, id, NQR_ID);
    memcpy(dst + NQR_FRAME_HEAD, body, body_len);
}

#endif
