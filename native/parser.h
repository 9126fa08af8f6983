/*
 * parser.h -- framing of the NSQ TCP protocol V2 from client to server, and
 * the splitting of an MPUB body.  Pure C (no Python); the Python bindings are
 * in parser.c and the pure-Python twin is nsqmp/protocol/pyparser.py (same
 * API, same results, same error texts: the tests compare them on arbitrary
 * input).
 *
 * A command on the wire (after the 4-byte magic "  V2"):
 *
 *   +-------+------------------+-------+----+
 *   | TOKEN | (SP param)*      | [\r]  | \n |   the command line
 *   +-------+------------------+-------+----+
 *     at most NQP_MAX_LINE (16384) bytes including the \n: nsqd reads lines
 *     with ReadSlice from a bufio.Reader of that size, which fails (and nsqd
 *     closes the connection) when the buffer fills before a \n.  The line is
 *     split on every single space (empty params are kept, as bytes.Split
 *     does); one trailing \r is dropped.
 *
 *   +-----------+---------------------+
 *   | size: i32 | body: size bytes    |   follows the line of IDENTIFY, AUTH,
 *   +-----------+---------------------+   PUB, MPUB and DPUB only
 *     big-endian and signed: nsqd reads an int32, so 0xFFFFFFFF is -1.
 *     Limits, checked in nsqd's order, with nsqd's texts:
 *       IDENTIFY, AUTH  size > max_body_size -> E_BAD_BODY "<CMD> body too big N > M"
 *                       size <= 0            -> E_BAD_BODY "<CMD> invalid body size N"
 *       PUB, DPUB       size <= 0            -> E_BAD_MESSAGE "<CMD> invalid message body size N"
 *                       size > max_msg_size  -> E_BAD_MESSAGE "<CMD> message too big N > M"
 *       MPUB            size <= 0            -> E_BAD_BODY "MPUB invalid body size N"
 *                       size > max_body_size -> E_BAD_BODY "MPUB body too big N > M"
 *
 * An MPUB body:
 *
 *   +------------+-----------+-------------+-----------+-------------+--
 *   | count: i32 | size: i32 | size bytes  | size: i32 | size bytes  | ...  count times
 *   +------------+-----------+-------------+-----------+-------------+--
 *     1 <= count <= (max_body_size - 4) / 5  else E_BAD_BODY "MPUB invalid message count N"
 *     (a body shorter than 4 bytes: E_BAD_BODY "MPUB failed to read message count")
 *     message i: fewer than 4 bytes left     -> E_BAD_MESSAGE "MPUB failed to read message(i) body size"
 *                size <= 0                    -> E_BAD_MESSAGE "MPUB invalid message(i) body size N"
 *                size > max_msg_size          -> E_BAD_MESSAGE "MPUB message too big N > M"
 *                fewer than size bytes left   -> E_BAD_MESSAGE "MPUB failed to read message body"
 *     Every message is validated before any is returned (MPUB is all or
 *     nothing).  Unlike nsqd, which reads the messages straight from the
 *     socket and uses the body size only for the checks above, nsqmp frames
 *     the body by its size: inner sizes that run past it are the "failed to
 *     read" errors nsqd gives at end of stream, and bytes after the last
 *     message are ignored.
 *
 * A plain FIN line (nqp_fin_line), the one command a consumer sends per
 * message, which the acceptor takes in runs without a tuple per command:
 *
 *   +------+--------------+-------+----+
 *   | FIN  | SP | ID: 16  | [\r]  | \n |   21 or 22 bytes, at most max_line
 *   +------+--------------+-------+----+
 *     no ID byte is a space or \n, and without the \r the ID's last byte is
 *     not \r either: exactly the lines that scan() would return as the params
 *     ("FIN", ID) with a 16-byte ID.  Anything else is left to scan().
 */
#ifndef NSQMP_PARSER_H
#define NSQMP_PARSER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NQP_MAX_LINE 16384

/* body_off of a scanned command, when it is not the body's offset */
#define NQP_NO_BODY (-1)        /* the command has no body */
#define NQP_BODY_PENDING (-2)   /* its body (or its size) is not all in the buffer yet */
#define NQP_BODY_INVALID (-3)   /* its body size breaks a limit: see the error */

/* outcome of one scan (why it stopped) */
#define NQP_SCAN_NEED_MORE 0        /* the rest of the buffer is an incomplete line (or nothing) */
#define NQP_SCAN_MORE 1             /* max_commands reached: scan again from `end` */
#define NQP_SCAN_BODY_PENDING 2     /* the last command's body is incomplete */
#define NQP_SCAN_BAD_BODY 3         /* the last command's body size is invalid */
#define NQP_SCAN_LINE_TOO_LONG 4    /* no \n within max_line bytes: nsqd closes, sending nothing */

/* known tokens; the first five carry a body */
enum {
    NQP_T_IDENTIFY, NQP_T_AUTH, NQP_T_PUB, NQP_T_MPUB, NQP_T_DPUB,
    NQP_T_SUB, NQP_T_RDY, NQP_T_FIN, NQP_T_REQ, NQP_T_TOUCH, NQP_T_CLS, NQP_T_NOP,
    NQP_T_COUNT,
    NQP_T_OTHER = NQP_T_COUNT
};

static const char *const nqp_token_names[NQP_T_COUNT] = {
    "IDENTIFY", "AUTH", "PUB", "MPUB", "DPUB",
    "SUB", "RDY", "FIN", "REQ", "TOUCH", "CLS", "NOP",
};

typedef struct {
    const char *code;   /* "E_BAD_BODY", ... (static) */
    char text[112];     /* the description after the code */
} nqp_error;

/* One command found by nqp_frame_next. */
typedef struct {
    size_t line;        /* offset of the command line */
    size_t line_len;    /* its length without the \n and a trailing \r */
    size_t next;        /* where the next command starts (line again if the body is not ready) */
    int token;          /* NQP_T_* */
    int64_t body_off;   /* >= 0, or NQP_NO_BODY / NQP_BODY_PENDING / NQP_BODY_INVALID */
    int64_t body_len;   /* the declared size; -1 while the size itself is incomplete */
} nqp_frame;

#define NQP_FRAME_OK 0
#define NQP_FRAME_NEED_MORE 1
#define NQP_FRAME_TOO_LONG 2

static inline int
nqp_token(const uint8_t *p, size_t n)
{
    /* a switch on the length first: one memcmp for the usual tokens */
    switch (n) {
    case 3:
        if (p[0] == 'F' && p[1] == 'I' && p[2] == 'N') return NQP_T_FIN;
        if (p[0] == 'R' && p[1] == 'D' && p[2] == 'Y') return NQP_T_RDY;
        if (p[0] == 'P' && p[1] == 'U' && p[2] == 'B') return NQP_T_PUB;
        if (p[0] == 'R' && p[1] == 'E' && p[2] == 'Q') return NQP_T_REQ;
        if (p[0] == 'S' && p[1] == 'U' && p[2] == 'B') return NQP_T_SUB;
        if (p[0] == 'N' && p[1] == 'O' && p[2] == 'P') return NQP_T_NOP;
        if (p[0] == 'C' && p[1] == 'L' && p[2] == 'S') return NQP_T_CLS;
        return NQP_T_OTHER;
    case 4:
        if (memcmp(p, "MPUB", 4) == 0) return NQP_T_MPUB;
        if (memcmp(p, "DPUB", 4) == 0) return NQP_T_DPUB;
        if (memcmp(p, "AUTH", 4) == 0) return NQP_T_AUTH;
        return NQP_T_OTHER;
    case 5:
        return memcmp(p, "TOUCH", 5) == 0 ? NQP_T_TOUCH : NQP_T_OTHER;
    case 8:
        return memcmp(p, "IDENTIFY", 8) == 0 ? NQP_T_IDENTIFY : NQP_T_OTHER;
    default:
        return NQP_T_OTHER;
    }
}

static inline int32_t
nqp_i32(const uint8_t *p)
{
    uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
    return (int32_t)v;
}

static inline void
nqp_fail(nqp_error *err, const char *code, const char *fmt, const char *name, long long a, long long b)
{
    err->code = code;
    snprintf(err->text, sizeof(err->text), fmt, name, a, b);
}

/* The limits on a body size, in nsqd's order; 0 if it is fine. */
static inline int
nqp_check_body(int token, int32_t size, int64_t max_msg, int64_t max_body, nqp_error *err)
{
    const char *name = nqp_token_names[token];
    switch (token) {
    case NQP_T_IDENTIFY:
    case NQP_T_AUTH:
        if ((int64_t)size > max_body) {
            nqp_fail(err, "E_BAD_BODY", "%s body too big %lld > %lld", name, size, (long long)max_body);
            return -1;
        }
        if (size <= 0) {
            nqp_fail(err, "E_BAD_BODY", "%s invalid body size %lld", name, size, 0);
            return -1;
        }
        return 0;
    case NQP_T_PUB:
    case NQP_T_DPUB:
        if (size <= 0) {
            nqp_fail(err, "E_BAD_MESSAGE", "%s invalid message body size %lld", name, size, 0);
            return -1;
        }
        if ((int64_t)size > max_msg) {
            nqp_fail(err, "E_BAD_MESSAGE", "%s message too big %lld > %lld", name, size, (long long)max_msg);
            return -1;
        }
        return 0;
    default: /* MPUB */
        if (size <= 0) {
            nqp_fail(err, "E_BAD_BODY", "%s invalid body size %lld", name, size, 0);
            return -1;
        }
        if ((int64_t)size > max_body) {
            nqp_fail(err, "E_BAD_BODY", "%s body too big %lld > %lld", name, size, (long long)max_body);
            return -1;
        }
        return 0;
    }
}

/*
 * The command at buf[pos..n): NQP_FRAME_OK with *f filled (and *err when
 * f->body_off is NQP_BODY_INVALID), NQP_FRAME_NEED_MORE when its line is not
 * complete, NQP_FRAME_TOO_LONG when no \n comes within max_line bytes.
 */
static inline int
nqp_frame_next(const uint8_t *buf, size_t n, size_t pos, size_t max_line,
               int64_t max_msg, int64_t max_body, nqp_frame *f, nqp_error *err)
{
    size_t avail = n - pos;
    size_t window = avail < max_line ? avail : max_line;
    const uint8_t *nl = window ? memchr(buf + pos, '\n', window) : NULL;
    if (nl == NULL)
        return avail >= max_line ? NQP_FRAME_TOO_LONG : NQP_FRAME_NEED_MORE;
    size_t eol = (size_t)(nl - buf);
    size_t len = eol - pos;
    if (len > 0 && buf[eol - 1] == '\r')
        len--;
    f->line = pos;
    f->line_len = len;
    f->next = eol + 1;
    const uint8_t *sp = len ? memchr(buf + pos, ' ', len) : NULL;
    f->token = nqp_token(buf + pos, sp ? (size_t)(sp - (buf + pos)) : len);
    f->body_len = 0;
    if (f->token > NQP_T_DPUB) {
        f->body_off = NQP_NO_BODY;
        return NQP_FRAME_OK;
    }
    size_t start = eol + 1;
    if (n - start < 4) {
        f->body_off = NQP_BODY_PENDING;
        f->body_len = -1;
        f->next = pos;
        return NQP_FRAME_OK;
    }
    int32_t size = nqp_i32(buf + start);
    f->body_len = size;
    if (nqp_check_body(f->token, size, max_msg, max_body, err) < 0) {
        f->body_off = NQP_BODY_INVALID;
        f->next = pos;
        return NQP_FRAME_OK;
    }
    if (n - start - 4 < (size_t)size) {
        f->body_off = NQP_BODY_PENDING;
        f->next = pos;
        return NQP_FRAME_OK;
    }
    f->body_off = (int64_t)(start + 4);
    f->next = start + 4 + (size_t)size;
    return NQP_FRAME_OK;
}

/* The length of the plain FIN line at buf[pos..n) (21 or 22), or 0 if there is none. */
static inline size_t
nqp_fin_line(const uint8_t *buf, size_t n, size_t pos, size_t max_line)
{
    if (n - pos < 21 || memcmp(buf + pos, "FIN ", 4) != 0)
        return 0;
    const uint8_t *id = buf + pos + 4;
    for (int i = 0; i < 16; i++)
        if (id[i] == ' ' || id[i] == '\n')
            return 0;
    size_t len;
    if (id[16] == '\n' && id[15] != '\r')
        len = 21;
    else if (id[16] == '\r' && n - pos >= 22 && id[17] == '\n')
        len = 22;
    else
        return 0;
    return len <= max_line ? len : 0;
}

/* Go's (max_body_size - 4) / 5: integer division truncating toward zero. */
static inline int64_t
nqp_mpub_max_messages(int64_t max_body)
{
    return (max_body - 4) / 5;
}

/*
 * Validate an MPUB body p[0..len): the message count, or -1 with *err.
 * Nothing is returned before everything is checked; a second walk
 * (nqp_mpub_next) then needs no checks.
 */
static inline int64_t
nqp_mpub_validate(const uint8_t *p, size_t len, int64_t max_msg, int64_t max_body, nqp_error *err)
{
    if (len < 4) {
        err->code = "E_BAD_BODY";
        snprintf(err->text, sizeof(err->text), "MPUB failed to read message count");
        return -1;
    }
    int32_t count = nqp_i32(p);
    if (count <= 0 || (int64_t)count > nqp_mpub_max_messages(max_body)) {
        nqp_fail(err, "E_BAD_BODY", "%s invalid message count %lld", "MPUB", count, 0);
        return -1;
    }
    size_t pos = 4;
    for (int32_t i = 0; i < count; i++) {
        if (len - pos < 4) {
            nqp_fail(err, "E_BAD_MESSAGE", "%s failed to read message(%lld) body size", "MPUB", i, 0);
            return -1;
        }
        int32_t size = nqp_i32(p + pos);
        if (size <= 0) {
            nqp_fail(err, "E_BAD_MESSAGE", "%s invalid message(%lld) body size %lld", "MPUB", i, size);
            return -1;
        }
        if ((int64_t)size > max_msg) {
            nqp_fail(err, "E_BAD_MESSAGE", "%s message too big %lld > %lld", "MPUB", size, (long long)max_msg);
            return -1;
        }
        pos += 4;
        if (len - pos < (size_t)size) {
            err->code = "E_BAD_MESSAGE";
            snprintf(err->text, sizeof(err->text), "MPUB failed to read message body");
            return -1;
        }
        pos += (size_t)size;
    }
    return count;
}

/* In a validated body, the message at *pos (4 at first): its offset and size; advances *pos. */
static inline void
nqp_mpub_next(const uint8_t *p, size_t *pos, size_t *off, size_t *size)
{
    *size = (size_t)nqp_i32(p + *pos);
    *off = *pos + 4;
    *pos = *off + *size;
}

#endif /* NSQMP_PARSER_H */
