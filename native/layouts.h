/*
 * layouts.h -- the byte layouts C and Python both read and write: the segment
 * file (its header and records), a record's due time, the NSQ message header,
 * the NSQ frame head, an MPUB's spans and an ack log entry.  Each is drawn
 * once, here; the Python declarations are in nsqmp/layouts.py (same names
 * without the NQL_ prefix) and tests/test_layouts.py holds the two equal
 * through nsqmp._native.layouts (layouts.c).  The ring's header and records
 * are drawn in ring.h (NQR_), the ring records' fields in nsqmp/ipc/records.py
 * (the timer's entries are named below), the deadline heap's own arrays in
 * heap.h.
 *
 * Segment file (little-endian; one writer: the acceptor, nsqmp/diskqueue/segment.py):
 *
 *   0            4         6          8       12                       64
 *   +------------+---------+----------+-------+------------------------+
 *   | magic NQSG | version | acceptor | seq   | reserved (zero)        |
 *   |            | u16 = 1 | u16      | u32   |                        |
 *   +------------+---------+----------+-------+------------------------+
 *   64: records, back to back, no alignment; a length word of 0 where a
 *   record would start marks the end of what was written.
 *
 * Segment record (written by publish.h's encoder, read by readback.h):
 *
 *   +----------------------+------------+-------------+-------------------------+
 *   | length u32 (LE)      | crc32c u32 | [due i64 LE]| message header | body   |
 *   | bit 31: DEFER        | (LE) of    |  only with  | (26 bytes,     |        |
 *   | bits 0-30: bytes     | everything |  DEFER: unix|  below)        |        |
 *   |   after the crc      | after it   |  ns, due at |                |        |
 *   +----------------------+------------+-------------+----------------+--------+
 *
 *   Limits: NQL_MESSAGE_HEAD (+ NQL_DUE with DEFER) <= length <= NQL_LENGTH_MASK
 *   (and <= max-msg-size + 34 in practice).  Record size = NQL_RECORD_HEAD + length.
 *
 * NSQ message header (big-endian; the data of a message frame, and the payload
 * of a segment record past its due time):
 *
 *   0               8              10                26
 *   +---------------+--------------+-----------------+------+
 *   | timestamp i64 | attempts u16 | id: 16 bytes,   | body |
 *   | ns since epoch|              | ASCII hex       |      |
 *   +---------------+--------------+-----------------+------+
 *
 * NSQ frame (server to client, big-endian):
 *
 *   +-----------+-----------+------+
 *   | size i32  | type i32  | data |   size = 4 + len(data)
 *   +-----------+-----------+------+   type 0 = response, 1 = error, 2 = message
 *
 *   A message frame's head is the frame head + the message header: 34 bytes.
 *
 * Spans (parser.c's mpub_spans writes them, publish.h's encoder reads them;
 * nsqmp.protocol.pyparser and nsqmp.diskqueue.pyencoder in Python), packed,
 * little-endian, one per message body of an MPUB (or a PUB's one):
 *
 *   +--------------------+------------+
 *   | offset in src u32  | size u32   |
 *   +--------------------+------------+
 *
 * Ack log entry (nsqmp/diskqueue/acklog.py appends them, acklog.c filters
 * them), little-endian, 16 bytes; an all-zero entry (channel id 0 never
 * exists) marks the end of what was written:
 *
 *   0                2              4          8              16
 *   +----------------+--------------+----------+--------------+
 *   | channel id u16 | acceptor u16 | seq u32  | offset u64   |
 *   +----------------+--------------+----------+--------------+
 */
#ifndef NSQMP_LAYOUTS_H
#define NSQMP_LAYOUTS_H

/* segment file header */
#define NQL_SEGMENT_MAGIC "NQSG"
#define NQL_SEGMENT_VERSION 1
#define NQL_SEGMENT_HEADER_SIZE 64           /* bytes before the first record */

/* segment record */
#define NQL_RECORD_HEAD 8               /* length word + crc */
#define NQL_LENGTH_MASK 0x7FFFFFFFu     /* of the length word: the bytes after the crc */
#define NQL_DEFER 0x80000000u           /* of the length word: a due time comes first */
#define NQL_DUE 8                       /* the due time, i64 LE unix ns */

/* NSQ message header */
#define NQL_MESSAGE_HEAD 26             /* timestamp + attempts + id */
#define NQL_ATTEMPTS_AT 8               /* attempts offset in the message header */
#define NQL_ID_AT 10                    /* id offset in the message header */
#define NQL_ID 16                       /* bytes of a message id */

/* NSQ frame */
#define NQL_FRAME_SIZE 4                /* the size word (big-endian): the bytes after it */
#define NQL_FRAME_HEAD 8                /* size + type */
#define NQL_FRAME_RESPONSE 0
#define NQL_FRAME_ERROR 1
#define NQL_FRAME_MESSAGE 2
#define NQL_MESSAGE_FRAME_HEAD (NQL_FRAME_HEAD + NQL_MESSAGE_HEAD)  /* 34 */

/* spans */
#define NQL_SPAN 8                      /* offset u32 + size u32 */

/* the entries of the timer's ring records (drawn with the records in
 * nsqmp/ipc/records.py, TOKEN and TOKEN_DEADLINE there; heap.c reads them) */
#define NQL_TOKEN 8                     /* u64 LE: a DISARM's or FIRE's entry */
#define NQL_ARM_ENTRY 16                /* token u64 LE, deadline i64 LE: an ARM's entry */

/* ack log entry */
#define NQL_ACK_ENTRY 16
#define NQL_ACK_ACCEPTOR_AT 2           /* u16 LE */
#define NQL_ACK_SEQ_AT 4                /* u32 LE */

#endif
