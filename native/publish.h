/*
 * publish.h -- the encoder of the publish path: message bodies (spans of a
 * read buffer) to segment records, and CRC-32C.  Pure C (no Python); the
 * bindings are in publish.c and the pure-Python twin is
 * nsqmp/diskqueue/pyencoder.py (same API, same bytes: the tests compare them).
 *
 * Input: spans (drawn in layouts.h; as mpub_spans returns them), one per
 * message body.
 *
 * Output, for span k, back to back: the segment record drawn in layouts.h
 * (length word with DEFER, crc32c, [due], message header, body), with
 * attempts 0 and id = 16 lowercase hex digits of first_id + k (the
 * snowflakes of nsqmp/protocol/ids.py; the caller reserves the block).
 * Record size = NQL_RECORD_HEAD + NQL_MESSAGE_HEAD + size (+ NQL_DUE with DEFER).
 *
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial and final
 * xor 0xFFFFFFFF): the value the crc32c package computes.  SSE4.2's crc32
 * instruction when the CPU has it (checked at run time), a table otherwise.
 */
#ifndef NSQMP_PUBLISH_H
#define NSQMP_PUBLISH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "layouts.h"


/* crc32c of p[0..n) continuing from `value` (a previous result, 0 to start) */
uint32_t nqe_crc32c(uint32_t value, const uint8_t *p, size_t n);

/* whether the SSE4.2 instruction is in use (for the tests and the docs) */
int nqe_crc32c_hardware(void);

static inline uint32_t
nqe_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void
nqe_put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

static inline void
nqe_put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void
nqe_put_u64be(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* Bytes of the records of `count` spans; (size_t)-1 if a record is too long
 * for the 31-bit length word. */
static inline size_t
nqe_records_size(const uint8_t *spans, size_t count, int deferred)
{
    size_t total = 0;
    size_t extra = NQL_RECORD_HEAD + NQL_MESSAGE_HEAD + (deferred ? NQL_DUE : 0);
    for (size_t k = 0; k < count; k++) {
        uint32_t size = nqe_u32le(spans + NQL_SPAN * k + 4);
        if ((uint64_t)size + extra - NQL_RECORD_HEAD > NQL_LENGTH_MASK)
            return (size_t)-1;
        total += size + extra;
    }
    return total;
}

#define NQE_OK 0
#define NQE_SPAN_OUTSIDE (-1)   /* a span is not inside src */
#define NQE_NO_ROOM (-2)        /* dst is too small */
#define NQE_TOO_LONG (-3)       /* a record does not fit the length word */

/* Write the records of `count` spans of src into dst (dst_len bytes of room);
 * *written gets the bytes written.  Nothing is written unless every span is
 * valid and everything fits. */
static inline int
nqe_encode(uint8_t *dst, size_t dst_len, const uint8_t *src, size_t src_len,
           const uint8_t *spans, size_t count, int64_t ts_ns, uint64_t first_id,
           int64_t due_ns, size_t *written)
{
    static const char hex[] = "0123456789abcdef";
    int deferred = due_ns != 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t off = nqe_u32le(spans + NQL_SPAN * k), size = nqe_u32le(spans + NQL_SPAN * k + 4);
        if (off + size > src_len)
            return NQE_SPAN_OUTSIDE;
    }
    size_t need = nqe_records_size(spans, count, deferred);
    if (need == (size_t)-1)
        return NQE_TOO_LONG;
    if (need > dst_len)
        return NQE_NO_ROOM;
    uint8_t *out = dst;
    for (size_t k = 0; k < count; k++) {
        uint32_t off = nqe_u32le(spans + NQL_SPAN * k), size = nqe_u32le(spans + NQL_SPAN * k + 4);
        uint8_t *payload = out + NQL_RECORD_HEAD;
        uint8_t *m = payload;
        if (deferred) {
            nqe_put_u64le(m, (uint64_t)due_ns);
            m += NQL_DUE;
        }
        nqe_put_u64be(m, (uint64_t)ts_ns);
        m[8] = 0;
        m[9] = 0;
        uint64_t id = first_id + k;
        for (int i = 0; i < NQL_ID; i++)
            m[NQL_ID_AT + i] = (uint8_t)hex[(id >> (60 - 4 * i)) & 0xF];
        memcpy(m + NQL_MESSAGE_HEAD, src + off, size);
        uint32_t length = (uint32_t)(m + NQL_MESSAGE_HEAD + size - payload);
        nqe_put_u32le(out, deferred ? length | NQL_DEFER : length);
        nqe_put_u32le(out + 4, nqe_crc32c(0, payload, length));
        out = payload + length;
    }
    *written = (size_t)(out - dst);
    return NQE_OK;
}

#endif
