/*
 * heap.h -- indexed d-ary min-heap of deadlines keyed by (owner, token), the
 * core of the timer process.  Pure C (no Python); the Python type is in
 * heap.c and the pure-Python twin is nsqmp/timer/heap.py (PyDeadlineHeap).
 *
 * Order.  Entries are ordered by (deadline, owner, token), a total order
 * (keys are unique), so the order in which entries leave the heap is fully
 * determined by its contents; the twin uses the very same order.
 *
 * Layout.
 *
 *   heap[0 .. n)   nqh_entry, 24 bytes each:
 *                  | deadline i64 | token u64 | owner u32 | slot u32 |
 *                  a NQH_ARITY-ary heap: the children of i are
 *                  ARITY*i+1 .. ARITY*i+ARITY; slot is the entry's index
 *                  in the hash table.
 *   table[0 .. tcap)  nqh_slot, 8 bytes each: | pos u32 | tag u32 |
 *                  open addressing with linear probing, tcap a power of
 *                  two; pos = NQH_EMPTY marks a free slot; tag = high 32
 *                  bits of the key's 64-bit hash, and the home slot of a
 *                  key is tag & (tcap - 1), so deletion can shift entries
 *                  back (no tombstones) without touching the heap.
 *
 * Both arrays live in private anonymous mappings (mmap / mremap / munmap)
 * rather than malloc: growing remaps pages instead of copying, and a shrink
 * or free gives the pages back to the kernel at once, so the timer's RSS
 * follows the number of entries (glibc keeps freed chunks below its dynamic
 * mmap threshold, up to 32 MiB, in the process).  Build with -DNQH_MALLOC
 * to use malloc instead (sanitizer runs).
 *
 * Every move of an entry inside the heap rewrites table[slot].pos and every
 * move inside the table rewrites heap[pos].slot, so lookup, disarm and re-arm
 * cost one probe sequence plus one O(log n) sift: nothing is left behind
 * lazily.  Both arrays grow by doubling and shrink when a quarter full
 * (heap) or an eighth full (table; it grows at 70 % load).
 *
 * Memory: 24 bytes per entry of heap capacity plus 8 bytes per table slot
 * (11..23 bytes per entry between the load limits).
 */
#ifndef NSQMP_HEAP_H
#define NSQMP_HEAP_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* mremap (Python.h defines it already) */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef NQH_ARITY
#define NQH_ARITY 4
#endif

#define NQH_EMPTY 0xFFFFFFFFu
#define NQH_MAX_ENTRIES 0x7FFFFFFFu     /* positions and slots fit in u32 */
#define NQH_MIN_HEAP_CAP 64u
#define NQH_MIN_TABLE_CAP 64u

typedef struct {
    int64_t deadline;
    uint64_t token;
    uint32_t owner;
    uint32_t slot;
} nqh_entry;

_Static_assert(sizeof(nqh_entry) == 24, "layout");

typedef struct {
    uint32_t pos;
    uint32_t tag;
} nqh_slot;

_Static_assert(sizeof(nqh_slot) == 8, "layout");

typedef struct {
    nqh_entry *heap;
    size_t n;
    size_t cap;
    nqh_slot *table;
    size_t tcap;            /* 0 or a power of two */
    size_t tmask;
} nqh_heap;

/* ------------------------------------------------------------------ */
/* memory: anonymous mappings                                          */
/* ------------------------------------------------------------------ */

#ifdef NQH_MALLOC
/* -DNQH_MALLOC: plain malloc, so that sanitizers see every array bound. */
static inline void *nqh_mem_alloc(size_t bytes)
{
    return malloc(bytes);
}

static inline void *nqh_mem_resize(void *p, size_t old, size_t bytes)
{
    (void)old;
    return realloc(p, bytes);
}

static inline void nqh_mem_free(void *p, size_t bytes)
{
    (void)bytes;
    free(p);
}
#else
static inline void *nqh_mem_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Resize a block from nqh_mem_alloc (or NULL with old == 0); NULL on
 * failure, the old block left as it was. */
static inline void *nqh_mem_resize(void *p, size_t old, size_t bytes)
{
    if (p == NULL)
        return nqh_mem_alloc(bytes);
    void *q = mremap(p, old, bytes, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
}

static inline void nqh_mem_free(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes);
}
#endif

/* ------------------------------------------------------------------ */
/* hashing                                                             */
/* ------------------------------------------------------------------ */

static inline uint32_t nqh_tag(uint32_t owner, uint64_t token)
{
    uint64_t x = token + (uint64_t)owner * 0x9E3779B97F4A7C15ull;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)(x >> 32);
}

static inline int nqh_less(const nqh_entry *a, const nqh_entry *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    if (a->owner != b->owner)
        return a->owner < b->owner;
    return a->token < b->token;
}

/* ------------------------------------------------------------------ */
/* construction                                                        */
/* ------------------------------------------------------------------ */

static inline void nqh_init(nqh_heap *h)
{
    memset(h, 0, sizeof(*h));
}

static inline void nqh_free(nqh_heap *h)
{
    nqh_mem_free(h->heap, h->cap * sizeof(nqh_entry));
    nqh_mem_free(h->table, h->tcap * sizeof(nqh_slot));
    nqh_init(h);
}

/* ------------------------------------------------------------------ */
/* hash table                                                          */
/* ------------------------------------------------------------------ */

/* Index of the slot holding (owner, token), or of the free slot where it
 * would go (table[i].pos == NQH_EMPTY).  The table must exist. */
static inline size_t nqh_probe(const nqh_heap *h, uint32_t owner, uint64_t token,
                               uint32_t tag)
{
    size_t i = tag & h->tmask;
    for (;;) {
        nqh_slot s = h->table[i];
        if (s.pos == NQH_EMPTY)
            return i;
        if (s.tag == tag) {
            const nqh_entry *e = &h->heap[s.pos];
            if (e->token == token && e->owner == owner)
                return i;
        }
        i = (i + 1) & h->tmask;
    }
}

/* Free slot for a key known to be absent (rehash, re-insert). */
static inline size_t nqh_probe_free(const nqh_heap *h, uint32_t tag)
{
    size_t i = tag & h->tmask;
    while (h->table[i].pos != NQH_EMPTY)
        i = (i + 1) & h->tmask;
    return i;
}

/* Empty slot i, shifting the rest of its cluster back. */
static inline void nqh_table_delete(nqh_heap *h, size_t i)
{
    nqh_slot *t = h->table;
    size_t mask = h->tmask;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t[j].pos == NQH_EMPTY)
            break;
        size_t home = t[j].tag & mask;
        /* t[j] may move to i when i lies on its probe path home .. j */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t[i] = t[j];
            h->heap[t[i].pos].slot = (uint32_t)i;
            i = j;
        }
    }
    t[i].pos = NQH_EMPTY;
}

/* Rebuild the table with newcap slots (power of two) from the heap. */
static inline int nqh_table_resize(nqh_heap *h, size_t newcap)
{
    nqh_slot *t = (nqh_slot *)nqh_mem_alloc(newcap * sizeof(nqh_slot));
    if (t == NULL)
        return -1;
    memset(t, 0xFF, newcap * sizeof(nqh_slot));
    size_t mask = newcap - 1;
    nqh_slot *old = h->table;
    for (size_t k = 0; k < h->tcap; k++) {
        if (old[k].pos == NQH_EMPTY)
            continue;
        size_t i = old[k].tag & mask;
        while (t[i].pos != NQH_EMPTY)
            i = (i + 1) & mask;
        t[i] = old[k];
        h->heap[old[k].pos].slot = (uint32_t)i;
    }
    nqh_mem_free(old, h->tcap * sizeof(nqh_slot));
    h->table = t;
    h->tcap = newcap;
    h->tmask = mask;
    return 0;
}

/* Table slots needed so that `count` entries stay under 70 % load. */
static inline size_t nqh_table_cap_for(size_t count)
{
    size_t cap = NQH_MIN_TABLE_CAP;
    while (count * 10 > cap * 7)
        cap *= 2;
    return cap;
}

/* ------------------------------------------------------------------ */
/* capacity                                                            */
/* ------------------------------------------------------------------ */

/* Make room for `count` entries in both arrays; -1 on allocation failure
 * (nothing changed but possibly a larger array). */
static inline int nqh_reserve(nqh_heap *h, size_t count)
{
    if (count > NQH_MAX_ENTRIES)
        return -1;
    if (count > h->cap) {
        size_t cap = h->cap ? h->cap : NQH_MIN_HEAP_CAP;
        while (cap < count)
            cap *= 2;
        nqh_entry *p = (nqh_entry *)nqh_mem_resize(h->heap, h->cap * sizeof(nqh_entry),
                                                   cap * sizeof(nqh_entry));
        if (p == NULL)
            return -1;
        h->heap = p;
        h->cap = cap;
    }
    if (count * 10 > h->tcap * 7 || h->tcap == 0) {
        if (nqh_table_resize(h, nqh_table_cap_for(count)) < 0)
            return -1;
    }
    return 0;
}

/* Give memory back after removals (best effort: failures are ignored). */
static inline void nqh_maybe_shrink(nqh_heap *h)
{
    if (h->cap > NQH_MIN_HEAP_CAP && h->n < h->cap / 4) {
        size_t cap = h->cap;
        while (cap > NQH_MIN_HEAP_CAP && h->n < cap / 4)
            cap /= 2;
        if (h->n == 0) {
            nqh_mem_free(h->heap, h->cap * sizeof(nqh_entry));
            h->heap = NULL;
            h->cap = 0;
        } else {
            nqh_entry *p = (nqh_entry *)nqh_mem_resize(h->heap, h->cap * sizeof(nqh_entry),
                                                       cap * sizeof(nqh_entry));
            if (p != NULL) {
                h->heap = p;
                h->cap = cap;
            }
        }
    }
    if (h->tcap > NQH_MIN_TABLE_CAP && h->n < h->tcap / 8) {
        if (h->n == 0) {
            nqh_mem_free(h->table, h->tcap * sizeof(nqh_slot));
            h->table = NULL;
            h->tcap = 0;
            h->tmask = 0;
        } else {
            (void)nqh_table_resize(h, nqh_table_cap_for(h->n * 2));
        }
    }
}

/* ------------------------------------------------------------------ */
/* heap moves                                                          */
/* ------------------------------------------------------------------ */

static inline void nqh_place(nqh_heap *h, size_t i, const nqh_entry *e)
{
    h->heap[i] = *e;
    h->table[e->slot].pos = (uint32_t)i;
}

/* Put e at hole i or above it. */
static inline void nqh_sift_up(nqh_heap *h, size_t i, nqh_entry e)
{
    nqh_entry *a = h->heap;
    while (i > 0) {
        size_t p = (i - 1) / NQH_ARITY;
        if (!nqh_less(&e, &a[p]))
            break;
        nqh_place(h, i, &a[p]);
        i = p;
    }
    nqh_place(h, i, &e);
}

/* Index of the least child of i, or n when i is a leaf. */
static inline size_t nqh_min_child(const nqh_entry *a, size_t n, size_t i)
{
    size_t c = NQH_ARITY * i + 1;
    if (c >= n)
        return n;
    size_t end = c + NQH_ARITY < n ? c + NQH_ARITY : n;
    size_t m = c;
    for (size_t k = c + 1; k < end; k++) {
        if (nqh_less(&a[k], &a[m]))
            m = k;
    }
    return m;
}

/* Put e at hole i or below it. */
static inline void nqh_sift_down(nqh_heap *h, size_t i, nqh_entry e)
{
    nqh_entry *a = h->heap;
    size_t n = h->n;
    for (;;) {
        size_t m = nqh_min_child(a, n, i);
        if (m == n || !nqh_less(&a[m], &e))
            break;
        nqh_place(h, i, &a[m]);
        i = m;
    }
    nqh_place(h, i, &e);
}

/* Put e (already in the table) at hole i, wherever it belongs. */
static inline void nqh_fix(nqh_heap *h, size_t i, nqh_entry e)
{
    if (i > 0 && nqh_less(&e, &h->heap[(i - 1) / NQH_ARITY]))
        nqh_sift_up(h, i, e);
    else
        nqh_sift_down(h, i, e);
}

/* Remove the entry at heap position i (table slot already emptied). */
static inline void nqh_remove_at(nqh_heap *h, size_t i)
{
    size_t last = --h->n;
    if (i == last)
        return;
    nqh_fix(h, i, h->heap[last]);
}

/* ------------------------------------------------------------------ */
/* operations                                                          */
/* ------------------------------------------------------------------ */

/* Arm or move (owner, token).  Room for one more entry must have been
 * reserved (nqh_reserve(h, h->n + 1)).  Returns 1 if the key was new. */
static inline int nqh_arm(nqh_heap *h, uint32_t owner, uint64_t token, int64_t deadline)
{
    uint32_t tag = nqh_tag(owner, token);
    size_t s = nqh_probe(h, owner, token, tag);
    uint32_t pos = h->table[s].pos;
    if (pos != NQH_EMPTY) {
        nqh_entry e = h->heap[pos];
        if (e.deadline == deadline)
            return 0;
        e.deadline = deadline;
        nqh_fix(h, pos, e);
        return 0;
    }
    nqh_entry e = {deadline, token, owner, (uint32_t)s};
    h->table[s].tag = tag;
    h->table[s].pos = (uint32_t)h->n;   /* overwritten by the sift */
    nqh_sift_up(h, h->n++, e);
    return 1;
}

/* Disarm (owner, token); returns 1 if it was armed. */
static inline int nqh_disarm(nqh_heap *h, uint32_t owner, uint64_t token)
{
    if (h->n == 0)
        return 0;
    size_t s = nqh_probe(h, owner, token, nqh_tag(owner, token));
    uint32_t pos = h->table[s].pos;
    if (pos == NQH_EMPTY)
        return 0;
    nqh_table_delete(h, s);
    nqh_remove_at(h, pos);
    return 1;
}

/* Remove the earliest entry into *out (the heap must not be empty). */
static inline void nqh_pop(nqh_heap *h, nqh_entry *out)
{
    *out = h->heap[0];
    nqh_table_delete(h, out->slot);
    nqh_remove_at(h, 0);
}

/* Insert an entry known to be absent, without allocating: the caller
 * guarantees capacity (used to undo pops). */
static inline void nqh_reinsert(nqh_heap *h, nqh_entry e)
{
    uint32_t tag = nqh_tag(e.owner, e.token);
    size_t s = nqh_probe_free(h, tag);
    h->table[s].tag = tag;
    h->table[s].pos = (uint32_t)h->n;
    e.slot = (uint32_t)s;
    nqh_sift_up(h, h->n++, e);
}

/* Heap order for a[0 .. n) with no table bookkeeping (Floyd). */
static inline void nqh_heapify_raw(nqh_entry *a, size_t n)
{
    if (n < 2)
        return;
    for (size_t i = (n - 2) / NQH_ARITY + 1; i-- > 0;) {
        nqh_entry e = a[i];
        size_t j = i;
        for (;;) {
            size_t m = nqh_min_child(a, n, j);
            if (m == n || !nqh_less(&a[m], &e))
                break;
            a[j] = a[m];
            j = m;
        }
        a[j] = e;
    }
}

/* Refill the table (same capacity, which must hold n entries) from the heap. */
static inline void nqh_reindex(nqh_heap *h)
{
    if (h->tcap == 0)
        return;
    memset(h->table, 0xFF, h->tcap * sizeof(nqh_slot));
    for (size_t i = 0; i < h->n; i++) {
        nqh_entry *e = &h->heap[i];
        uint32_t tag = nqh_tag(e->owner, e->token);
        size_t s = nqh_probe_free(h, tag);
        h->table[s].pos = (uint32_t)i;
        h->table[s].tag = tag;
        e->slot = (uint32_t)s;
    }
}

/* Drop every entry of owner; returns how many. */
static inline size_t nqh_forget_owner(nqh_heap *h, uint32_t owner)
{
    size_t kept = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (h->heap[i].owner != owner)
            h->heap[kept++] = h->heap[i];
    }
    size_t dropped = h->n - kept;
    if (dropped == 0)
        return 0;
    h->n = kept;
    nqh_heapify_raw(h->heap, kept);
    nqh_reindex(h);
    nqh_maybe_shrink(h);
    return dropped;
}

#endif /* NSQMP_HEAP_H */
