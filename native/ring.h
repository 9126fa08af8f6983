/*
 * ring.h -- single-producer / single-consumer byte ring living in shared
 * memory.  Layout definition plus the inline operations; the Python type is
 * in ring.c and the pure-Python twin (nsqmp/ipc/pyring.py) implements the
 * very same layout and semantics.
 *
 * Binary layout (little-endian host order, offsets in bytes from the start
 * of the buffer; the buffer must be at least 8-byte aligned for the native
 * implementation):
 *
 *   offset  size
 *        +------+--------------------------------------------------------+
 *      0 | u32  | magic 0x4752514E ("NQRG" read as a little-endian u32)   |
 *      4 | u16  | version = 1                                            |
 *      6 | u16  | reserved (0)                                           |
 *      8 | u64  | capacity: bytes in the data area (power of two,        |
 *        |      |   4096 <= capacity <= 1 GiB)                           |
 *     16 | u32  | max_record = capacity / 4 (largest payload accepted)   |
 *     20 | 44 B | reserved (0)                                           |
 *        +------+--------------------------------------------------------+
 *     64 | u64  | head: total bytes ever written     (producer-owned)    |
 *     72 | 56 B | padding (own cache line)                               |
 *        +------+--------------------------------------------------------+
 *    128 | u64  | tail: total bytes ever consumed    (consumer-owned)    |
 *    136 | 56 B | padding                                                |
 *        +------+--------------------------------------------------------+
 *    192 | u32  | consumer_sleeping: consumer stores 1 right before it   |
 *        |      |   sleeps; a producer that sees 1 after publishing      |
 *        |      |   swaps it to 0 and must ring the consumer's doorbell  |
 *    196 | 60 B | padding                                                |
 *        +------+--------------------------------------------------------+
 *    256 | u32  | producer_waiting: producer stores 1 when it found the  |
 *        |      |   ring full; the consumer swaps it to 0 after freeing  |
 *        |      |   space and must ring the producer's doorbell          |
 *    260 |252 B | reserved (0)                                           |
 *        +------+--------------------------------------------------------+
 *    512 | capacity bytes: data area                                     |
 *        +---------------------------------------------------------------+
 *
 * head and tail are monotonic byte counters (never reduced modulo the
 * capacity); the position in the data area is counter & (capacity - 1);
 * used = head - tail.
 *
 * Record in the data area (always starts at a multiple of 8):
 *
 *   +------------------+------------------+---------------------+---------+
 *   | u32 payload_len  | u32 reserved (0) | payload (len bytes) | pad to 8|
 *   +------------------+------------------+---------------------+---------+
 *
 * A record never straddles the end of the data area.  If it does not fit in
 * the bytes left before the end, the producer writes a wrap marker
 * (payload_len = 0xFFFFFFFF) at the current position when at least 8 bytes
 * remain (a consumer treats fewer than 8 remaining bytes as an implicit
 * wrap), and places the record at offset 0.  The skipped bytes count as
 * used until the consumer passes them.
 *
 * Memory ordering:
 *   producer: write record bytes; store-release head; seq_cst fence;
 *             load consumer_sleeping, and if 1 exchange it to 0 (=> wake).
 *   consumer: load-acquire head; read records; store-release tail;
 *             seq_cst fence; load producer_waiting, exchange 1 -> 0.
 *   sleep:    (unless data is already visible) consumer stores
 *             consumer_sleeping = 1; seq_cst fence; re-reads head (Dekker:
 *             either it sees the new head or the producer sees the flag).
 *             Producer wait is symmetric with producer_waiting / tail.
 *
 * Idle release (Ring.release_if_idle, ring.c): the producer may give the
 * data area's whole pages back to the kernel while head == tail (it does
 * when the ring is also quiet: less than capacity/32 pushed since its
 * previous call, a slow timer's period apart); the
 * consumer never reads bytes outside [tail, head), and it copies a record
 * out before its release store of tail, so the next push simply lands in
 * fresh zero pages.  The header page is never released.
 */
#ifndef NSQMP_RING_H
#define NSQMP_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nsqmp ring layout is little-endian; big-endian hosts are not supported"
#endif

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "64-bit atomics must be lock-free to live in shared memory");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2,
               "32-bit atomics must be lock-free to live in shared memory");

#define NQR_MAGIC 0x4752514Eu
#define NQR_VERSION 1u
#define NQR_HEADER_SIZE 512u
#define NQR_MIN_CAPACITY 4096ull
#define NQR_MAX_CAPACITY (1ull << 30)
#define NQR_RECORD_HEADER 8u
#define NQR_WRAP_MARKER 0xFFFFFFFFu
#define NQR_BUFFER_ALIGN 8u

typedef struct {
    uint32_t magic;                       /*   0 */
    uint16_t version;                     /*   4 */
    uint16_t reserved0;                   /*   6 */
    uint64_t capacity;                    /*   8 */
    uint32_t max_record;                  /*  16 */
    uint8_t reserved1[44];                /*  20 */
    _Atomic uint64_t head;                /*  64 */
    uint8_t pad_head[56];                 /*  72 */
    _Atomic uint64_t tail;                /* 128 */
    uint8_t pad_tail[56];                 /* 136 */
    _Atomic uint32_t consumer_sleeping;   /* 192 */
    uint8_t pad_sleeping[60];             /* 196 */
    _Atomic uint32_t producer_waiting;    /* 256 */
    uint8_t reserved2[252];               /* 260 */
} nqr_header;

_Static_assert(offsetof(nqr_header, version) == 4, "layout");
_Static_assert(offsetof(nqr_header, capacity) == 8, "layout");
_Static_assert(offsetof(nqr_header, max_record) == 16, "layout");
_Static_assert(offsetof(nqr_header, head) == 64, "layout");
_Static_assert(offsetof(nqr_header, tail) == 128, "layout");
_Static_assert(offsetof(nqr_header, consumer_sleeping) == 192, "layout");
_Static_assert(offsetof(nqr_header, producer_waiting) == 256, "layout");
_Static_assert(sizeof(nqr_header) == NQR_HEADER_SIZE, "layout");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "layout");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "layout");

/* A view of one formatted ring; cheap to copy, holds no resources. */
typedef struct {
    nqr_header *hdr;
    unsigned char *data;
    uint64_t capacity;
    uint64_t mask;
    uint32_t max_record;
} nqr_ring;

typedef enum {
    NQR_OK = 0,
    NQR_ERR_CAPACITY,   /* capacity not a power of two in [4096, 1 GiB] */
    NQR_ERR_SIZE,       /* buffer too small */
    NQR_ERR_ALIGN,      /* buffer not 8-byte aligned */
    NQR_ERR_MAGIC,      /* not a ring */
    NQR_ERR_VERSION,    /* unsupported layout version */
    NQR_ERR_HEADER,     /* inconsistent header fields */
} nqr_status;

static inline const char *nqr_strerror(nqr_status st)
{
    switch (st) {
    case NQR_OK: return "ok";
    case NQR_ERR_CAPACITY:
        return "ring capacity must be a power of two between 4096 and 1 GiB";
    case NQR_ERR_SIZE: return "buffer too small for the ring";
    case NQR_ERR_ALIGN: return "ring buffer must be 8-byte aligned";
    case NQR_ERR_MAGIC: return "buffer does not hold a ring (bad magic)";
    case NQR_ERR_VERSION: return "unsupported ring layout version";
    case NQR_ERR_HEADER: return "corrupt ring header";
    }
    return "unknown ring error";
}

static inline int nqr_capacity_valid(uint64_t capacity)
{
    return capacity >= NQR_MIN_CAPACITY && capacity <= NQR_MAX_CAPACITY &&
           (capacity & (capacity - 1)) == 0;
}

/* Bytes a record with `len` payload bytes occupies (header + padding). */
static inline uint64_t nqr_record_size(uint64_t len)
{
    return (NQR_RECORD_HEADER + len + 7u) & ~(uint64_t)7u;
}

/* Write a fresh header (head, tail and flags zero) into mem. */
static inline nqr_status nqr_format(void *mem, size_t len, uint64_t capacity)
{
    if (!nqr_capacity_valid(capacity))
        return NQR_ERR_CAPACITY;
    if (len < NQR_HEADER_SIZE || len - NQR_HEADER_SIZE < capacity)
        return NQR_ERR_SIZE;
    if (((uintptr_t)mem) % NQR_BUFFER_ALIGN)
        return NQR_ERR_ALIGN;
    nqr_header *h = (nqr_header *)mem;
    memset(mem, 0, NQR_HEADER_SIZE);
    h->version = NQR_VERSION;
    h->capacity = capacity;
    h->max_record = (uint32_t)(capacity / 4);
    atomic_store_explicit(&h->head, 0, memory_order_relaxed);
    atomic_store_explicit(&h->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&h->consumer_sleeping, 0, memory_order_relaxed);
    atomic_store_explicit(&h->producer_waiting, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    h->magic = NQR_MAGIC;
    atomic_thread_fence(memory_order_seq_cst);
    return NQR_OK;
}

/* Validate an already formatted buffer and fill *r. */
static inline nqr_status nqr_attach(nqr_ring *r, void *mem, size_t len)
{
    if (len < NQR_HEADER_SIZE)
        return NQR_ERR_SIZE;
    if (((uintptr_t)mem) % NQR_BUFFER_ALIGN)
        return NQR_ERR_ALIGN;
    nqr_header *h = (nqr_header *)mem;
    atomic_thread_fence(memory_order_acquire);
    if (h->magic != NQR_MAGIC)
        return NQR_ERR_MAGIC;
    if (h->version != NQR_VERSION)
        return NQR_ERR_VERSION;
    uint64_t capacity = h->capacity;
    if (!nqr_capacity_valid(capacity))
        return NQR_ERR_CAPACITY;
    if (h->max_record != capacity / 4)
        return NQR_ERR_HEADER;
    if (len - NQR_HEADER_SIZE < capacity)
        return NQR_ERR_SIZE;
    r->hdr = h;
    r->data = (unsigned char *)mem + NQR_HEADER_SIZE;
    r->capacity = capacity;
    r->mask = capacity - 1;
    r->max_record = h->max_record;
    return NQR_OK;
}

/* ------------------------------------------------------------------ */
/* Producer side                                                       */
/* ------------------------------------------------------------------ */

static inline uint64_t nqr_producer_head(const nqr_ring *r)
{
    /* The producer is the only writer of head. */
    return atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
}

static inline uint64_t nqr_producer_tail(const nqr_ring *r)
{
    return atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
}

/*
 * Where a record of `len` payload bytes would go with local head `head` and
 * observed tail `tail`.  Returns 1 and sets *skip (bytes skipped at the end
 * of the data area, 0 if none) when it fits, 0 when the ring is too full.
 */
static inline int nqr_fits(const nqr_ring *r, uint64_t head, uint64_t tail,
                           uint32_t len, uint64_t *skip)
{
    uint64_t need = nqr_record_size(len);
    uint64_t pos = head & r->mask;
    uint64_t room = r->capacity - pos;
    uint64_t sk = need <= room ? 0 : room;
    if ((head - tail) + sk + need > r->capacity)
        return 0;
    *skip = sk;
    return 1;
}

/*
 * Write one record at local head *head (not published).  Returns 1 and
 * advances *head when written, 0 if it did not fit.  len <= max_record is
 * the caller's responsibility.
 */
static inline int nqr_write(const nqr_ring *r, uint64_t *head, uint64_t tail,
                            const void *payload, uint32_t len)
{
    uint64_t skip;
    if (!nqr_fits(r, *head, tail, len, &skip))
        return 0;
    uint64_t h = *head;
    if (skip) {
        if (skip >= NQR_RECORD_HEADER) {
            uint32_t *marker = (uint32_t *)(r->data + (h & r->mask));
            marker[0] = NQR_WRAP_MARKER;
            marker[1] = 0;
        }
        h += skip;
    }
    unsigned char *p = r->data + (h & r->mask);
    ((uint32_t *)p)[0] = len;
    ((uint32_t *)p)[1] = 0;
    if (len)
        memcpy(p + NQR_RECORD_HEADER, payload, len);
    *head = h + nqr_record_size(len);
    return 1;
}

/*
 * Publish the local head (one release store) and run the wake check.
 * Returns 1 when the consumer had announced sleep (flag swapped 1 -> 0):
 * the caller must ring the consumer's doorbell.
 */
static inline int nqr_publish(const nqr_ring *r, uint64_t head)
{
    atomic_store_explicit(&r->hdr->head, head, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->hdr->consumer_sleeping, memory_order_relaxed) &&
        atomic_exchange_explicit(&r->hdr->consumer_sleeping, 0,
                                 memory_order_seq_cst) == 1)
        return 1;
    return 0;
}

/*
 * Producer found the ring full for a record of `needed` payload bytes:
 * unless it fits already, announce waiting, fence, re-check.  Returns 1
 * when it is safe to sleep on the doorbell, 0 (flag cleared) when the
 * record fits now.
 */
static inline int nqr_prepare_wait(const nqr_ring *r, uint32_t needed)
{
    uint64_t skip;
    uint64_t head = nqr_producer_head(r);
    /* Cheap pre-check: no announcement (and no doorbell drawn from the
     * consumer) when the record already fits. */
    if (nqr_fits(r, head, nqr_producer_tail(r), needed, &skip)) {
        if (atomic_load_explicit(&r->hdr->producer_waiting, memory_order_relaxed))
            atomic_store_explicit(&r->hdr->producer_waiting, 0, memory_order_relaxed);
        return 0;
    }
    atomic_store_explicit(&r->hdr->producer_waiting, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (nqr_fits(r, head, nqr_producer_tail(r), needed, &skip)) {
        atomic_store_explicit(&r->hdr->producer_waiting, 0, memory_order_relaxed);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Consumer side                                                       */
/* ------------------------------------------------------------------ */

static inline uint64_t nqr_consumer_head(const nqr_ring *r)
{
    return atomic_load_explicit(&r->hdr->head, memory_order_acquire);
}

static inline uint64_t nqr_consumer_tail(const nqr_ring *r)
{
    /* The consumer is the only writer of tail. */
    return atomic_load_explicit(&r->hdr->tail, memory_order_relaxed);
}

typedef enum {
    NQR_READ_EMPTY = 0,
    NQR_READ_OK = 1,
    NQR_READ_CORRUPT = -1,
} nqr_read_status;

/*
 * Locate the next record at local tail `tail` given observed head `head`.
 * On NQR_READ_OK sets *payload, *len and *next_tail (tail after consuming
 * it, wrap skip included).  Nothing is modified in shared memory.
 */
static inline nqr_read_status nqr_peek(const nqr_ring *r, uint64_t tail,
                                       uint64_t head, const unsigned char **payload,
                                       uint32_t *len, uint64_t *next_tail)
{
    if (tail == head)
        return NQR_READ_EMPTY;
    if (head - tail > r->capacity)
        return NQR_READ_CORRUPT;
    uint64_t pos = tail & r->mask;
    uint64_t room = r->capacity - pos;
    uint32_t n;
    if (room < NQR_RECORD_HEADER ||
        (n = ((const uint32_t *)(r->data + pos))[0]) == NQR_WRAP_MARKER) {
        tail += room;
        if (tail >= head) /* a wrap is always followed by a record */
            return NQR_READ_CORRUPT;
        pos = 0;
        room = r->capacity;
        n = ((const uint32_t *)r->data)[0];
    }
    uint64_t size = nqr_record_size(n);
    if (n > r->max_record || size > room || size > head - tail)
        return NQR_READ_CORRUPT;
    *payload = r->data + pos + NQR_RECORD_HEADER;
    *len = n;
    *next_tail = tail + size;
    return NQR_READ_OK;
}

static inline void nqr_consume(const nqr_ring *r, uint64_t tail)
{
    atomic_store_explicit(&r->hdr->tail, tail, memory_order_release);
}

/*
 * Consumer is about to sleep: unless data is already visible, announce it,
 * fence, re-check head.  Returns 1
 * when it is safe to sleep on the doorbell, 0 (flag cleared) when data is
 * present.
 */
static inline int nqr_prepare_sleep(const nqr_ring *r)
{
    /* Cheap pre-check: do not announce sleep (and draw a doorbell from the
     * producer) when data is already visible. */
    if (nqr_consumer_head(r) != nqr_consumer_tail(r)) {
        if (atomic_load_explicit(&r->hdr->consumer_sleeping, memory_order_relaxed))
            atomic_store_explicit(&r->hdr->consumer_sleeping, 0, memory_order_relaxed);
        return 0;
    }
    atomic_store_explicit(&r->hdr->consumer_sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (nqr_consumer_head(r) != nqr_consumer_tail(r)) {
        atomic_store_explicit(&r->hdr->consumer_sleeping, 0, memory_order_relaxed);
        return 0;
    }
    return 1;
}

/*
 * After consuming (tail stored): fence, then swap producer_waiting 1 -> 0.
 * Returns 1 when the caller must ring the producer's doorbell.
 */
static inline int nqr_take_producer_wakeup(const nqr_ring *r)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->hdr->producer_waiting, memory_order_relaxed) &&
        atomic_exchange_explicit(&r->hdr->producer_waiting, 0,
                                 memory_order_seq_cst) == 1)
        return 1;
    return 0;
}

/* Bytes in use (head - tail), as seen by either side. */
static inline uint64_t nqr_used(const nqr_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
    uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
    uint64_t used = head - tail;
    return used > r->capacity ? r->capacity : used;
}

#endif /* NSQMP_RING_H */
