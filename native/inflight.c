/*
 * inflight.c -- InFlightMap: a channel's messages in flight, by message id.
 * The pure-Python twin is nsqmp/router/pyinflight.py (same API, same results).
 *
 * Each entry is (message, attempts, flight): the Message delivered (message.h),
 * the attempts counted with this delivery, and the Flight (flight.h) it went
 * out in.  The map holds only those two native types and reads them from their
 * structs, never an attribute by name: anything else (the pure-Python twins'
 * Message and Flight included: they go with the twin map, as the router picks
 * all native or all twin) is refused with TypeError where it comes in, so a
 * renamed field is a compile error here, not a run-time one.  A Python dict
 * of per-message objects cost the router about
 * 0.8 us a message at a million in flight (an object made, a dict insert, a
 * dict delete, each missing the cache); here the id is the key, stored in the
 * slot, and a delivery pass or a timed-out flight is one call.
 *
 * The table is open addressing with linear probing, no tombstones (a removal
 * shifts the run behind it back), at most 7/10 full; it doubles when that is
 * passed and halves when it is under 1/8 full, moving its entries over a few at
 * a time (see start_resize).  One slot, 40 bytes:
 *
 *   0        8        16         24          32      36        40
 *   | id[0:8] | id[8:16] | message * | flight *   | hash32 | attempts |
 *
 *   message == NULL: the slot is empty; MOVED: emptied, in a table being
 *   resized away.  hash32: the low 32 bits of the id's hash (its home slot for
 *   tables up to 2^32 slots).
 *
 * Stale slots.  A flight that times out with every member still in it
 * (expire()) is one call that touches none of its slots: its (message,
 * attempts) members go to the queue as they are, and the flight joins the
 * `expired` set.  A slot naming an expired flight is stale: it reads as absent
 * (get, FIN, REQ, TOUCH, len, entries), and is taken over in place when fly()
 * puts its message in flight again, or emptied by forget() when the message
 * leaves the queue another way.  Landing slot by slot missed the cache for
 * every message (500-600 ns each in a busy router); the redelivery that
 * follows has to find the slot anyway.  Each set item counts the stale slots
 * naming its flight and leaves with the last of them.
 *
 * The map owns a reference to each message and flight it holds, and to each
 * expired flight, and takes part in cycle collection (a flight refers to its
 * consumer, which refers to the channel that owns this map).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "finrun.h"
#include "flight.h"
#include "message.h"

#define ID_LEN NQL_ID  /* layouts.h, via message.h */
#define MIN_CAP 16
#define STEP 16        /* old slots moved by each operation while a resize runs */

typedef struct {
    uint8_t id[ID_LEN];
    PyObject *message;   /* NULL: empty slot; MOVED: gone (old table only) */
    PyObject *flight;
    uint32_t hash;
    uint32_t attempts;
} slot_t;

typedef struct {
    slot_t *slots;
    size_t cap;      /* a power of two */
    size_t live;     /* entries held */
} table_t;

/* A flight expire() timed out whole, and how many slots still name it. */
typedef struct {
    PyObject *flight;  /* NULL: an empty item; else a reference owned by the set */
    size_t stale;      /* slots naming it (each stale), > 0 */
} expired_t;

typedef struct {
    expired_t *items;  /* open addressing by the flight's address, linear probing */
    size_t cap;        /* a power of two, or 0 (no items array) */
    size_t used;
} expired_set_t;

typedef struct {
    PyObject_HEAD
    table_t cur;     /* where entries are put */
    table_t old;     /* a table being moved into cur, STEP slots per operation (slots NULL: none) */
    size_t cursor;   /* old slots before it are moved */
    expired_set_t expired;  /* flights timed out whole; their members' slots are stale */
    size_t stale;    /* stale slots, in cur and old: occupied, yet not in flight */
} MapObject;

/* A resize moves the entries a few at a time, so that no single call pays for
 * the whole table (a million entries take some 60 ms to rehash at once): the old
 * table stays readable meanwhile.  It is only read and emptied: an entry moved or
 * removed from it leaves MOVED behind, which keeps its probe runs intact, and
 * lookups try cur first, then old. */
static char moved_marker;
#define MOVED ((PyObject *)&moved_marker)

static PyTypeObject Map_Type;
/* Method names of the deque `ready` (looked up once per call, not per message):
 * the only names this file looks up; no field of anything is read by name. */
static PyObject *str_popleft;   /* "popleft" */
static PyObject *str_append;    /* "append" */
static PyObject *str_extend;    /* "extend" */

static uint32_t
id_hash(const uint8_t *id)
{
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    uint64_t h = a * 0x9E3779B97F4A7C15ULL ^ b;
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    return (uint32_t)h;
}

/* The 16 id bytes of a bytes object; NULL (no exception) if it is not a 16-byte bytes. */
static const uint8_t *
id_bytes(PyObject *id)
{
    if (!PyBytes_Check(id) || PyBytes_GET_SIZE(id) != ID_LEN)
        return NULL;
    return (const uint8_t *)PyBytes_AS_STRING(id);
}

/* A Message or a Flight coming in: 0 if it is the native type (message.h,
 * flight.h), else -1 with a TypeError naming what came instead. */
static int
check_message(PyObject *message)
{
    if (NSQMP_MESSAGE_CHECK(message))
        return 0;
    PyErr_Format(PyExc_TypeError, "InFlightMap holds nsqmp._native.Message only, not %R", (PyObject *)Py_TYPE(message));
    return -1;
}

static int
check_flight(PyObject *flight)
{
    if (NSQMP_FLIGHT_CHECK(flight))
        return 0;
    PyErr_Format(PyExc_TypeError, "InFlightMap holds nsqmp._native.Flight only, not %R", (PyObject *)Py_TYPE(flight));
    return -1;
}

/* Backward-shift deletion (vacate, expired_remove): after a hole at `hole`, the
 * item at j whose home slot is `home` stays where it is if its home lies
 * cyclically in (hole, j]; otherwise it moves into the hole. */
static int
stays_behind_hole(size_t hole, size_t j, size_t home)
{
    return hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
}

static int
occupied(const slot_t *s)
{
    return s->message != NULL && s->message != MOVED;
}

/* ------------------------------------------------------------------ */
/* the expired flights                                                 */
/* ------------------------------------------------------------------ */

static size_t
address_hash(const PyObject *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h ^ (h >> 29));
}

static expired_t *
expired_find(const MapObject *self, const PyObject *flight)
{
    const expired_set_t *e = &self->expired;
    if (e->used == 0)
        return NULL;
    size_t mask = e->cap - 1;
    for (size_t i = address_hash(flight) & mask;; i = (i + 1) & mask) {
        expired_t *x = &e->items[i];
        if (x->flight == flight)
            return x;
        if (x->flight == NULL)
            return NULL;
    }
}

static void
expired_place(expired_t *items, size_t cap, expired_t item)
{
    size_t i = address_hash(item.flight) & (cap - 1);
    while (items[i].flight != NULL)
        i = (i + 1) & (cap - 1);
    items[i] = item;
}

/* flight (not in the set) with n stale slots, taking a new reference; -1 with
 * MemoryError, the set unchanged. */
static int
expired_add(MapObject *self, PyObject *flight, size_t n)
{
    expired_set_t *e = &self->expired;
    if ((e->used + 1) * 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        expired_t *items = PyMem_Calloc(cap, sizeof(expired_t));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < e->cap; i++)
            if (e->items[i].flight != NULL)
                expired_place(items, cap, e->items[i]);
        PyMem_Free(e->items);
        e->items = items;
        e->cap = cap;
    }
    expired_place(e->items, e->cap, (expired_t){Py_NewRef(flight), n});
    e->used++;
    self->stale += n;
    return 0;
}

/* Takes item x out of the set (the items behind it shift back, as in vacate);
 * returns the set's reference to its flight, for the caller to release once
 * the map is consistent again.  An emptied set gives its memory back. */
static PyObject *
expired_remove(MapObject *self, expired_t *x)
{
    expired_set_t *e = &self->expired;
    PyObject *flight = x->flight;
    size_t mask = e->cap - 1;
    size_t hole = (size_t)(x - e->items);
    for (size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
        expired_t *u = &e->items[j];
        if (u->flight == NULL)
            break;
        if (stays_behind_hole(hole, j, address_hash(u->flight) & mask))
            continue;
        e->items[hole] = *u;
        hole = j;
    }
    e->items[hole] = (expired_t){NULL, 0};
    if (--e->used == 0 && e->cap > 64) {
        PyMem_Free(e->items);
        e->items = NULL;
        e->cap = 0;
    }
    return flight;
}

static int
is_stale(const MapObject *self, const slot_t *s)
{
    return self->stale != 0 && expired_find(self, s->flight) != NULL;
}

/* Slot s (stale or not) no longer counts as stale: it is about to be taken over
 * or emptied.  Returns a reference to release once that is done (the set's, if
 * this was the last stale slot of its flight), or NULL. */
static PyObject *
unstale(MapObject *self, const slot_t *s)
{
    if (self->stale == 0)
        return NULL;
    expired_t *x = expired_find(self, s->flight);
    if (x == NULL)
        return NULL;
    self->stale--;
    return --x->stale == 0 ? expired_remove(self, x) : NULL;
}

static slot_t *
find_in(const table_t *t, const uint8_t *id, uint32_t hash)
{
    size_t mask = t->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        slot_t *s = &t->slots[i];
        if (s->message == NULL)
            return NULL;
        if (s->message != MOVED && s->hash == hash && memcmp(s->id, id, ID_LEN) == 0)
            return s;
    }
}

/* The slot holding id (in cur or old), or NULL. */
static slot_t *
find(MapObject *self, const uint8_t *id, uint32_t hash)
{
    slot_t *s = find_in(&self->cur, id, hash);
    if (s == NULL && self->old.slots != NULL)
        s = find_in(&self->old, id, hash);
    return s;
}

/* The slot holding id in flight (not stale), or NULL. */
static slot_t *
find_live(MapObject *self, const uint8_t *id, uint32_t hash)
{
    slot_t *s = find(self, id, hash);
    return s != NULL && is_stale(self, s) ? NULL : s;
}

static int
in_old(const MapObject *self, const slot_t *s)
{
    return self->old.slots != NULL && s >= self->old.slots && s < self->old.slots + self->old.cap;
}

/* Places a slot's contents in cur, which has room and no such id. */
static void
place(table_t *t, const slot_t *src)
{
    size_t mask = t->cap - 1;
    size_t i = src->hash & mask;
    while (t->slots[i].message != NULL)
        i = (i + 1) & mask;
    t->slots[i] = *src;
    t->live++;
}

/* Moves up to n old slots into cur; frees old once all are. */
static void
step(MapObject *self, size_t n)
{
    table_t *old = &self->old;
    if (old->slots == NULL)
        return;
    for (; n > 0 && self->cursor < old->cap; n--, self->cursor++) {
        slot_t *s = &old->slots[self->cursor];
        if (occupied(s)) {
            place(&self->cur, s);
            s->message = MOVED;
            s->flight = NULL;
            old->live--;
        }
    }
    if (self->cursor == old->cap) {
        PyMem_Free(old->slots);
        old->slots = NULL;
        old->cap = old->live = 0;
    }
}

/* Starts moving everything into a new table of cap slots (any resize before
 * it is finished first); -1 with MemoryError, the map unchanged. */
static int
start_resize(MapObject *self, size_t cap)
{
    slot_t *slots = PyMem_Calloc(cap, sizeof(slot_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    step(self, SIZE_MAX);
    self->old = self->cur;
    self->cursor = 0;
    self->cur.slots = slots;
    self->cur.cap = cap;
    self->cur.live = 0;
    return 0;
}

static size_t
total(const MapObject *self)
{
    return self->cur.live + self->old.live;
}

/* Empties a slot (its references already taken over or released): in old it
 * becomes MOVED; in cur the entries of its run that may move closer to home
 * shift back. */
static void
vacate(MapObject *self, slot_t *s)
{
    if (in_old(self, s)) {
        s->message = MOVED;
        s->flight = NULL;
        self->old.live--;
        return;
    }
    table_t *t = &self->cur;
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(s - t->slots);
    for (size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
        slot_t *u = &t->slots[j];
        if (u->message == NULL)
            break;
        if (stays_behind_hole(hole, j, u->hash & mask))
            continue;
        t->slots[hole] = *u;
        hole = j;
    }
    memset(&t->slots[hole], 0, sizeof(slot_t));
    t->live--;
}

/* After removals: a table under 1/8 full starts moving into one of half the
 * size.  Never fails (without memory the table stays as it is). */
static void
maybe_shrink(MapObject *self)
{
    step(self, STEP);
    if (PyErr_Occurred())  /* on a caller's error path: never clear its exception below */
        return;
    if (self->old.slots == NULL && self->cur.cap > MIN_CAP && total(self) * 8 < self->cur.cap) {
        if (start_resize(self, self->cur.cap / 2) < 0)
            PyErr_Clear();
    }
}

/* Sets id -> (message, attempts, flight), taking new references; -1 on error. */
static int
put(MapObject *self, const uint8_t *id, PyObject *message, uint32_t attempts, PyObject *flight)
{
    uint32_t hash = id_hash(id);
    slot_t *s = find(self, id, hash);
    if (s != NULL) {  /* in flight already (TOUCH's put), or stale: a timed-out message again */
        PyObject *release = unstale(self, s);
        Py_INCREF(message);
        Py_INCREF(flight);
        Py_SETREF(s->message, message);
        Py_SETREF(s->flight, flight);
        s->attempts = attempts;
        Py_XDECREF(release);
        return 0;
    }
    /* cur holds at most 7/10 of its slots, old entries included (they all go there) */
    if ((total(self) + 1) * 10 > self->cur.cap * 7 && start_resize(self, self->cur.cap * 2) < 0)
        return -1;
    slot_t fresh;
    memcpy(fresh.id, id, ID_LEN);
    fresh.message = Py_NewRef(message);
    fresh.flight = Py_NewRef(flight);
    fresh.hash = hash;
    fresh.attempts = attempts;
    place(&self->cur, &fresh);
    step(self, STEP);
    return 0;
}

/* message.id -> (message, attempts, flight), flight checked by the caller; -1
 * with an exception (message not a Message, attempts past 32 bits). */
static int
put_message(MapObject *self, PyObject *message, unsigned long attempts, PyObject *flight)
{
    if (attempts > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "attempts does not fit in 32 bits");
        return -1;
    }
    if (check_message(message) < 0)
        return -1;
    return put(self, ((nsqmp_Message *)message)->id, message, (uint32_t)attempts, flight);
}

static PyObject *
entry_tuple(const slot_t *s)
{
    PyObject *attempts = PyLong_FromUnsignedLong(s->attempts);
    if (attempts == NULL)
        return NULL;
    PyObject *t = PyTuple_Pack(3, s->message, attempts, s->flight);
    Py_DECREF(attempts);
    return t;
}

/* Drops a table's references and memory. */
static void
free_table(table_t *t)
{
    if (t->slots == NULL)
        return;
    for (size_t i = 0; i < t->cap; i++) {
        if (occupied(&t->slots[i])) {
            Py_DECREF(t->slots[i].message);
            Py_DECREF(t->slots[i].flight);
        }
    }
    PyMem_Free(t->slots);
    t->slots = NULL;
    t->cap = t->live = 0;
}

/* ------------------------------------------------------------------ */
/* the type                                                            */
/* ------------------------------------------------------------------ */

static PyObject *
Map_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "InFlightMap() takes no arguments");
        return NULL;
    }
    MapObject *self = PyObject_GC_New(MapObject, type);
    if (self == NULL)
        return NULL;
    self->cur.slots = PyMem_Calloc(MIN_CAP, sizeof(slot_t));
    self->cur.cap = MIN_CAP;
    self->cur.live = 0;
    self->old.slots = NULL;
    self->old.cap = self->old.live = 0;
    self->cursor = 0;
    self->expired = (expired_set_t){NULL, 0, 0};
    self->stale = 0;
    if (self->cur.slots == NULL) {
        self->cur.cap = 0;
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static int
Map_clear(MapObject *self)
{
    /* detach the tables and the set first: a decref may run code that looks at this map */
    expired_set_t expired = self->expired;
    self->expired = (expired_set_t){NULL, 0, 0};
    self->stale = 0;
    for (size_t i = 0; i < expired.cap; i++)
        Py_XDECREF(expired.items[i].flight);
    PyMem_Free(expired.items);
    table_t cur = self->cur, old = self->old;
    self->old.slots = NULL;
    self->old.cap = self->old.live = 0;
    self->cur.slots = PyMem_Calloc(MIN_CAP, sizeof(slot_t));
    self->cur.cap = MIN_CAP;
    self->cur.live = 0;
    if (self->cur.slots == NULL) {  /* keep the old table, emptied, rather than none */
        self->cur.slots = cur.slots;
        self->cur.cap = cur.cap;
        for (size_t i = 0; i < cur.cap; i++) {
            Py_CLEAR(cur.slots[i].message);
            Py_CLEAR(cur.slots[i].flight);
        }
        memset(cur.slots, 0, cur.cap * sizeof(slot_t));
        free_table(&old);
        return 0;
    }
    free_table(&cur);
    free_table(&old);
    return 0;
}

static int
Map_traverse(MapObject *self, visitproc visit, void *arg)
{
    const table_t *tables[2] = {&self->cur, &self->old};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; tables[k]->slots != NULL && i < tables[k]->cap; i++) {
            const slot_t *s = &tables[k]->slots[i];
            if (occupied(s)) {
                Py_VISIT(s->message);
                Py_VISIT(s->flight);
            }
        }
    }
    for (size_t i = 0; i < self->expired.cap; i++)
        Py_VISIT(self->expired.items[i].flight);
    return 0;
}

static void
Map_dealloc(MapObject *self)
{
    PyObject_GC_UnTrack(self);
    Map_clear(self);
    PyMem_Free(self->cur.slots);
    PyObject_GC_Del(self);
}

static Py_ssize_t
Map_length(MapObject *self)
{
    return (Py_ssize_t)(total(self) - self->stale);
}

static int
Map_contains(MapObject *self, PyObject *key)
{
    const uint8_t *id = id_bytes(key);
    return id != NULL && find_live(self, id, id_hash(id)) != NULL;
}

PyDoc_STRVAR(get_doc,
"get(msg_id, /)\n--\n\n"
"(message, attempts, flight) of the message in flight with this id, or None.");

static PyObject *
Map_get(MapObject *self, PyObject *key)
{
    const uint8_t *id = id_bytes(key);
    slot_t *s = id == NULL ? NULL : find_live(self, id, id_hash(id));
    if (s == NULL)
        Py_RETURN_NONE;
    return entry_tuple(s);
}

PyDoc_STRVAR(put_doc,
"put(message, attempts, flight, /)\n--\n\n"
"message.id is in flight in `flight` with `attempts` (replacing any entry of that id).");

static PyObject *
Map_put(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "put() takes exactly 3 arguments");
        return NULL;
    }
    unsigned long attempts = PyLong_AsUnsignedLong(args[1]);
    if (attempts == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (check_flight(args[2]) < 0 || put_message(self, args[0], attempts, args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(remove_doc,
"remove(msg_id, /)\n--\n\n"
"Takes the message with this id out of flight; KeyError if it is not in flight.");

static PyObject *
Map_remove(MapObject *self, PyObject *key)
{
    const uint8_t *id = id_bytes(key);
    slot_t *s = id == NULL ? NULL : find_live(self, id, id_hash(id));
    if (s == NULL) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    PyObject *message = s->message, *flight = s->flight;
    vacate(self, s);
    maybe_shrink(self);
    Py_DECREF(message);
    Py_DECREF(flight);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(move_doc,
"move(msg_id, flight, /)\n--\n\n"
"The message with this id is now in `flight` (TOUCH); KeyError if not in flight.");

static PyObject *
Map_move(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "move() takes exactly 2 arguments");
        return NULL;
    }
    if (check_flight(args[1]) < 0)
        return NULL;
    const uint8_t *id = id_bytes(args[0]);
    slot_t *s = id == NULL ? NULL : find_live(self, id, id_hash(id));
    if (s == NULL) {
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    Py_INCREF(args[1]);
    Py_SETREF(s->flight, args[1]);
    Py_RETURN_NONE;
}

/* A list holding only Messages and ints reaches nothing the cycle collector
 * sees (a Message is not a container to it), so it need not be tracked; a
 * tracked one costs every young collection a look at each item, which at a
 * million in flight is a cache miss each: 8 ms gen-1 passes in the router,
 * whose flights' lists are young for their whole 10 s msg_timeout.  `clean`:
 * the list holds nothing else.  (An untracked list stays so when appended to.) */
static void
settle_tracking(PyObject *list, int clean)
{
    if (clean && PyObject_GC_IsTracked(list))
        PyObject_GC_UnTrack(list);
    else if (!clean && !PyObject_GC_IsTracked(list))
        PyObject_GC_Track(list);
}

/* A flight's members are one flat list, message then attempts for each:
 * [m0, a0, m1, a1, ...].  Pairs made for it would live as long as the flight,
 * a million of them at a million in flight; measured, keeping them cost every
 * delivery 15-20 ns in fly() and as much again in pack_frames (more memory for
 * the caches), against 8 more bytes per member here (the small ints are
 * shared). */
static int
check_members(PyObject *members)
{
    if (!PyList_Check(members) || PyList_GET_SIZE(members) % 2 != 0) {
        PyErr_SetString(PyExc_TypeError, "members must be a list of message, attempts, ...");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(fly_doc,
"fly(ready, n, flight, members, out, /)\n--\n\n"
"One delivery pass for one consumer: takes n (message, attempts) entries from\n"
"the left of the deque `ready` (fewer if it runs out), puts each in flight in\n"
"`flight` with attempts + 1, appends message and attempts + 1 to the flat\n"
"list `members` and (message, attempts + 1) to the list `out` (out None: no\n"
"pairs are made; pack_members frames them from `members`).  Returns how many\n"
"it took.  `members` is left out of cycle collection while it holds only the\n"
"router's Messages (and ints): no cycle can pass through it.");

/* Prefetching.  At a million in flight a pass misses the cache two or three
 * times per message (its ready entry, the message, its slot), one after the
 * other.  The loops below start those loads some messages ahead, so that they
 * overlap: the message AHEAD_MESSAGE ahead, the slot of the one AHEAD_SLOT
 * ahead (whose message is in the cache by then).  A prefetch never faults.
 * The helpers are always inlined: gcc takes a function that only prefetches
 * for one without effects and drops the call. */
#define AHEAD_MESSAGE 8
#define AHEAD_SLOT 4
#define CHUNK 64       /* ready entries fly() pops at a time */
#define PREFETCH_HELPER static inline __attribute__((always_inline)) void

PREFETCH_HELPER
prefetch_message(PyObject *message)
{
    __builtin_prefetch(message);
    __builtin_prefetch((const char *)message + offsetof(nsqmp_Message, id));
}

PREFETCH_HELPER
prefetch_slot(const MapObject *self, PyObject *message)
{
    if (NSQMP_MESSAGE_CHECK(message))  /* it runs ahead of the check where the message comes in */
        __builtin_prefetch(&self->cur.slots[id_hash(((nsqmp_Message *)message)->id) & (self->cur.cap - 1)]);
}

PREFETCH_HELPER
prefetch_id_slot(const MapObject *self, const uint8_t *id)
{
    __builtin_prefetch(&self->cur.slots[id_hash(id) & (self->cur.cap - 1)]);
}

/* For a loop over a flat members list at i (a message's index): the loads of
 * the messages ahead; their slots too when `slots`. */
PREFETCH_HELPER
prefetch_ahead(const MapObject *self, PyObject *members, Py_ssize_t i, int slots)
{
    Py_ssize_t n = PyList_GET_SIZE(members);
    if (i + 2 * AHEAD_MESSAGE < n)
        prefetch_message(PyList_GET_ITEM(members, i + 2 * AHEAD_MESSAGE));
    if (slots && i + 2 * AHEAD_SLOT < n)
        prefetch_slot(self, PyList_GET_ITEM(members, i + 2 * AHEAD_SLOT));
}

/* The message of a ready entry popped by fly(), for prefetching: NULL unless a pair. */
static inline PyObject *
entry_message(PyObject *entry)
{
    return PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2 ? PyTuple_GET_ITEM(entry, 0) : NULL;
}

/* One popped ready entry into flight; 0, or -1 with an exception. */
static int
fly_one(MapObject *self, PyObject *entry, PyObject *flight, PyObject *members, PyObject *out)
{
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "a ready entry must be a (message, attempts) pair");
        return -1;
    }
    PyObject *message = PyTuple_GET_ITEM(entry, 0);
    unsigned long attempts = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(entry, 1));
    if (attempts == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    attempts++;
    if (put_message(self, message, attempts, flight) < 0)
        return -1;
    int rc = 0;
    PyObject *count;
    if (out != Py_None) {  /* the (message, attempts) pair too; members shares its count */
        PyObject *pair = nsqmp_message_pair(message, (long long)attempts);
        if (pair == NULL)
            return -1;
        rc = PyList_Append(out, pair);
        count = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        Py_DECREF(pair);
    } else if ((count = PyLong_FromUnsignedLong(attempts)) == NULL) {
        return -1;
    }
    if (rc == 0)
        rc = PyList_Append(members, message);
    if (rc == 0)
        rc = PyList_Append(members, count);
    Py_DECREF(count);
    return rc;
}

static PyObject *
Map_fly(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "fly() takes exactly 5 arguments");
        return NULL;
    }
    PyObject *ready = args[0], *flight = args[2], *members = args[3], *out = args[4];
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (check_members(members) < 0 || check_flight(flight) < 0)
        return NULL;
    if (out != Py_None && !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out must be a list or None");
        return NULL;
    }
    if (PyObject_Length(ready) < 0)
        return NULL;
    PyObject *popleft = PyObject_GetAttr(ready, str_popleft);
    if (popleft == NULL)
        return NULL;
    /* entries are popped CHUNK at a time, so that the loop can look ahead */
    PyObject *chunk[CHUNK];
    Py_ssize_t took = 0, got = 0, i = 0;
    /* untracked, or empty: it holds only Messages and ints so far (and fly adds
     * nothing else: an entry whose message is not a Message is refused) */
    int clean = !PyObject_GC_IsTracked(members) || PyList_GET_SIZE(members) == 0;
    while (took < n) {
        got = i = 0;
        while (got < CHUNK && took + got < n && PyObject_Length(ready) > 0) {
            PyObject *entry = PyObject_CallNoArgs(popleft);
            if (entry == NULL)
                goto fail;
            __builtin_prefetch(entry);
            chunk[got++] = entry;
        }
        if (got == 0)
            break;
        for (i = 0; i < got; i++) {
            PyObject *ahead;
            if (i + AHEAD_MESSAGE < got && (ahead = entry_message(chunk[i + AHEAD_MESSAGE])) != NULL)
                prefetch_message(ahead);
            if (i + AHEAD_SLOT < got && (ahead = entry_message(chunk[i + AHEAD_SLOT])) != NULL)
                prefetch_slot(self, ahead);
            int rc = fly_one(self, chunk[i], flight, members, out);
            Py_DECREF(chunk[i]);
            if (rc < 0) {
                i++;
                goto fail;
            }
            took++;
        }
        got = 0;
    }
    settle_tracking(members, clean);
    Py_DECREF(popleft);
    return PyLong_FromSsize_t(took);
fail:
    settle_tracking(members, clean);
    /* the entries popped after the failing one go back to the front, in order */
    {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        for (Py_ssize_t j = got - 1; j >= i; j--) {
            PyObject *r = PyObject_CallMethod(ready, "appendleft", "(O)", chunk[j]);
            if (r == NULL)
                PyErr_Clear();
            Py_XDECREF(r);
            Py_DECREF(chunk[j]);
        }
        PyErr_Restore(type, value, traceback);
    }
    Py_DECREF(popleft);
    return NULL;
}

/* The slot holding this very message (stale or not); NULL otherwise (and, with
 * a TypeError set, if it is not a Message: check PyErr_Occurred). */
static slot_t *
message_slot(MapObject *self, PyObject *message)
{
    if (check_message(message) < 0)
        return NULL;
    const uint8_t *id = ((nsqmp_Message *)message)->id;
    slot_t *s = find(self, id, id_hash(id));
    return s != NULL && s->message == message ? s : NULL;
}

/* The slot of message if it is in flight in `flight`, which is not expired;
 * NULL otherwise (and on error, with an exception set: check PyErr_Occurred). */
static slot_t *
member_slot(MapObject *self, PyObject *message, PyObject *flight)
{
    slot_t *s = message_slot(self, message);
    /* a stale slot names an expired flight, never this one */
    return s != NULL && s->flight == flight ? s : NULL;
}

PyDoc_STRVAR(land_doc,
"land(members, flight, ready, /)\n--\n\n"
"Every message of the flat list `members` (message, attempts, ...: what fly()\n"
"gave the flight) still in flight in `flight` leaves it and is appended to the\n"
"deque `ready` as (message, attempts), in members' order (a timed-out flight,\n"
"or a dropped consumer's).  Returns how many.");

static PyObject *
Map_land(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "land() takes exactly 3 arguments");
        return NULL;
    }
    PyObject *members = args[0], *flight = args[1], *ready = args[2];
    if (check_members(members) < 0 || check_flight(flight) < 0)
        return NULL;
    if (expired_find(self, flight) != NULL)  /* its members are in the queue already */
        return PyLong_FromLong(0);
    PyObject *append = PyObject_GetAttr(ready, str_append);
    if (append == NULL)
        return NULL;
    Py_ssize_t landed = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members); i += 2) {
        prefetch_ahead(self, members, i, 1);
        PyObject *message = PyList_GET_ITEM(members, i);
        Py_INCREF(message);
        slot_t *s = member_slot(self, message, flight);
        if (s == NULL) {
            Py_DECREF(message);
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        PyObject *pair = nsqmp_message_pair(message, s->attempts);
        if (pair == NULL) {
            Py_DECREF(message);
            goto fail;
        }
        PyObject *held_message = s->message, *held_flight = s->flight;
        vacate(self, s);
        Py_DECREF(held_message);
        Py_DECREF(held_flight);
        PyObject *r = PyObject_CallOneArg(append, pair);
        Py_DECREF(pair);
        Py_DECREF(message);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        landed++;
    }
    maybe_shrink(self);
    Py_DECREF(append);
    return PyLong_FromSsize_t(landed);
fail:
    maybe_shrink(self);
    Py_DECREF(append);
    return NULL;
}

PyDoc_STRVAR(expire_doc,
"expire(members, flight, ready, /)\n--\n\n"
"land() for a flight every member of which is still in it (the caller knows:\n"
"no FIN, REQ or TOUCH has taken one out): each goes to the deque `ready` as\n"
"(message, attempts), from `members` alone; their slots stay behind, stale,\n"
"not looked at.  A stale slot reads as absent; fly() takes it over when it\n"
"puts the message in flight again, forget() empties it.  Returns how many.");

static PyObject *
Map_expire(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "expire() takes exactly 3 arguments");
        return NULL;
    }
    PyObject *members = args[0], *flight = args[1], *ready = args[2];
    if (check_members(members) < 0 || check_flight(flight) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(members) / 2;
    if (n == 0 || expired_find(self, flight) != NULL)
        return PyLong_FromLong(0);
    PyObject *entries = PyList_New(n);
    if (entries == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        prefetch_ahead(self, members, 2 * k, 0);
        PyObject *message = PyList_GET_ITEM(members, 2 * k);
        PyObject *attempts = PyList_GET_ITEM(members, 2 * k + 1);
        if (check_message(message) < 0) {  /* before expired_add: the map stays as it was */
            Py_DECREF(entries);  /* its unset items are NULL: skipped */
            return NULL;
        }
        PyObject *pair = PyLong_CheckExact(attempts) ? PyTuple_New(2) : NULL;
        if (pair == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "members must be a list of message, attempts, ...");
            Py_DECREF(entries);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, Py_NewRef(message));
        PyTuple_SET_ITEM(pair, 1, Py_NewRef(attempts));
        PyObject_GC_UnTrack(pair);  /* a Message and an int, as nsqmp_message_pair: in no cycle */
        PyList_SET_ITEM(entries, k, pair);
    }
    if (expired_add(self, flight, (size_t)n) < 0) {
        Py_DECREF(entries);
        return NULL;
    }
    PyObject *r = PyObject_CallMethodOneArg(ready, str_extend, entries);
    Py_DECREF(entries);
    if (r == NULL) {  /* nothing queued: the flight's slots are in flight again */
        expired_t *x = expired_find(self, flight);
        self->stale -= x->stale;
        Py_DECREF(expired_remove(self, x));
        return NULL;
    }
    Py_DECREF(r);
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(forget_doc,
"forget(messages, /)\n--\n\n"
"These messages, timed out by expire(), left the queue without going back in\n"
"flight (dropped, skipped by sample_rate): their stale slots are emptied.\n"
"Messages without one are passed over.");

static PyObject *
Map_forget(MapObject *self, PyObject *messages)
{
    if (!PyList_Check(messages)) {
        PyErr_SetString(PyExc_TypeError, "messages must be a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; self->stale != 0 && i < PyList_GET_SIZE(messages); i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        Py_INCREF(message);
        slot_t *s = message_slot(self, message);
        if (s == NULL && PyErr_Occurred()) {
            Py_DECREF(message);
            return NULL;
        }
        if (s != NULL && is_stale(self, s)) {
            PyObject *release = unstale(self, s);
            PyObject *held_message = s->message, *held_flight = s->flight;
            vacate(self, s);
            Py_DECREF(held_message);
            Py_DECREF(held_flight);
            Py_XDECREF(release);
        }
        Py_DECREF(message);
    }
    maybe_shrink(self);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(alive_doc,
"alive(members, flight, /)\n--\n\n"
"The members (message, attempts, ...) of the flat list `members` whose message\n"
"is still in flight in `flight`, in order, as a flat list (untracked by the\n"
"cycle collector while it holds only Messages and ints, as fly()'s).");

static PyObject *
Map_alive(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "alive() takes exactly 2 arguments");
        return NULL;
    }
    PyObject *members = args[0], *flight = args[1];
    if (check_members(members) < 0 || check_flight(flight) < 0)
        return NULL;
    PyObject *result = PyList_New(0);
    if (result == NULL || expired_find(self, flight) != NULL)
        return result;
    int clean = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members); i += 2) {
        PyObject *message = PyList_GET_ITEM(members, i);
        PyObject *attempts = PyList_GET_ITEM(members, i + 1);
        clean &= PyLong_CheckExact(attempts);  /* message: a Message, or member_slot refuses it */
        Py_INCREF(message);
        Py_INCREF(attempts);
        slot_t *s = member_slot(self, message, flight);
        int rc = s == NULL ? (PyErr_Occurred() ? -1 : 0) : PyList_Append(result, message);
        if (rc == 0 && s != NULL)
            rc = PyList_Append(result, attempts);
        Py_DECREF(message);
        Py_DECREF(attempts);
        if (rc < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    settle_tracking(result, clean);
    return result;
}

PyDoc_STRVAR(finish_doc,
"finish(ids, start, consumer, bad, emptied, channel=None, acks=None, /)\n--\n\n"
"FIN of the 16-byte ids packed in the buffer `ids` from offset `start`, in\n"
"order: each one in flight in a flight of `consumer` leaves it (the flight's\n"
"`live` count drops; a flight it reaches 0 in is appended to the list\n"
"`emptied`), any other id is appended to the list `bad` as bytes.  Returns\n"
"(messages, runs): the finished messages in order, and their acknowledgements\n"
"as [segment, [offset, ...]] for each run of consecutive messages of one\n"
"segment (messages without a segment left out).\n\n"
"With a channel id and a bytearray `acks`: the files' accounting is done here\n"
"(finrun.h): the ack log entries appended to acks (none for channel id 0),\n"
"each segment's refs and acked counts updated, and the result is (messages,\n"
"drained): the segments whose refs reached 0 in this call.");

/* Writes a flight's live count less `left` (its struct: every flight in the
 * map is a Flight); appends it to emptied at 0. */
static int
settle_flight(PyObject *flight, Py_ssize_t left, PyObject *emptied)
{
    nsqmp_Flight *f = (nsqmp_Flight *)flight;
    f->live -= left;
    return f->live == 0 ? PyList_Append(emptied, flight) : 0;
}

/* Adds a finished message's (segment, offset) to runs (its struct: every
 * message in the map is a Message). */
static int
add_ack(PyObject *runs, PyObject *message, PyObject **run_segment, PyObject **run_offsets)
{
    const nsqmp_Message *m = (const nsqmp_Message *)message;
    PyObject *segment = Py_NewRef(m->segment);
    if (segment == Py_None) {
        Py_DECREF(segment);
        return 0;
    }
    if (segment != *run_segment) {
        PyObject *offsets = PyList_New(0);
        PyObject *run = offsets == NULL ? NULL : PyList_New(2);
        if (run == NULL) {
            Py_XDECREF(offsets);
            Py_DECREF(segment);
            return -1;
        }
        PyList_SET_ITEM(run, 0, segment);  /* steals */
        PyList_SET_ITEM(run, 1, offsets);  /* steals */
        int rc = PyList_Append(runs, run);
        Py_DECREF(run);
        if (rc < 0)
            return -1;
        *run_segment = segment;  /* borrowed: runs holds it */
        *run_offsets = offsets;
    } else {
        Py_DECREF(segment);
    }
    PyObject *offset = PyLong_FromLongLong(m->offset);
    if (offset == NULL)
        return -1;
    int rc = PyList_Append(*run_offsets, offset);
    Py_DECREF(offset);
    return rc;
}

static PyObject *
Map_finish(MapObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "finish() takes 5 or 7 arguments");
        return NULL;
    }
    PyObject *consumer = args[2], *bad = args[3], *emptied = args[4];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(bad) || !PyList_Check(emptied)) {
        PyErr_SetString(PyExc_TypeError, "bad and emptied must be lists");
        return NULL;
    }
    unsigned long channel = 0;
    if (nargs == 7) {
        channel = PyLong_AsUnsignedLong(args[5]);
        if (channel == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (channel > 0xFFFF) {
            PyErr_SetString(PyExc_OverflowError, "a channel id is a u16");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *messages = PyList_New(0), *runs = PyList_New(0), *result = NULL;
    PyObject *run_segment = NULL, *run_offsets = NULL;  /* borrowed from runs */
    PyObject *flight = NULL;  /* the run of FINs' flight (a new reference) */
    Py_ssize_t left = 0;      /* FINs of that flight not yet written to its live count */
    PyObject *checked = NULL; /* the last flight found to be consumer's (borrowed, compared only) */
    finrun_t files;           /* the 7-argument form: acks and refs done here */
    int accounting = 0;
    if (messages == NULL || runs == NULL)
        goto done;
    Py_ssize_t first = start < 0 ? 0 : start;
    if (nargs == 7) {  /* runs becomes the list of drained segments */
        if (finrun_open(&files, args[6], runs, (unsigned)channel) < 0)
            goto done;
        accounting = 1;
    }
    const uint8_t *buf = view.buf;
    for (Py_ssize_t pos = first; pos + ID_LEN <= view.len; pos += ID_LEN) {
        const uint8_t *id = buf + pos;
        if (pos + (AHEAD_MESSAGE + 1) * ID_LEN <= view.len)  /* the slot of the id AHEAD_MESSAGE on */
            prefetch_id_slot(self, id + AHEAD_MESSAGE * ID_LEN);
        if (pos + (AHEAD_SLOT + 1) * ID_LEN <= view.len) {  /* the message of the one AHEAD_SLOT on */
            const uint8_t *next = id + AHEAD_SLOT * ID_LEN;
            slot_t *t = find_in(&self->cur, next, id_hash(next));
            if (t != NULL)
                prefetch_message(t->message);
        }
        slot_t *s = find(self, id, id_hash(id));
        if (s != NULL && s->flight != checked && is_stale(self, s))
            s = NULL;  /* timed out: in the queue, not in flight */
        if (s != NULL && s->flight != checked)  /* its consumer, compared only */
            checked = ((nsqmp_Flight *)s->flight)->consumer == consumer ? s->flight : NULL;
        if (s == NULL || s->flight != checked) {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)id, ID_LEN);
            int rc = raw == NULL ? -1 : PyList_Append(bad, raw);
            Py_XDECREF(raw);
            if (rc < 0)
                goto done;
            continue;
        }
        if (s->flight != flight) {
            if (flight != NULL && settle_flight(flight, left, emptied) < 0)
                goto done;
            Py_XSETREF(flight, Py_NewRef(s->flight));
            left = 0;
        }
        PyObject *message = s->message, *held_flight = s->flight;
        vacate(self, s);
        Py_DECREF(held_flight);  /* `flight` keeps it alive */
        left++;
        int rc = PyList_Append(messages, message);
        if (rc == 0 && !accounting)
            rc = add_ack(runs, message, &run_segment, &run_offsets);
        else if (rc == 0 && ((const nsqmp_Message *)message)->segment != Py_None)
            rc = finrun_add(&files, ((const nsqmp_Message *)message)->segment,
                            ((const nsqmp_Message *)message)->offset);
        Py_DECREF(message);  /* messages holds it */
        if (rc < 0)
            goto done;
    }
    if (flight != NULL && settle_flight(flight, left, emptied) < 0)
        goto done;
    if (accounting) {
        accounting = 0;
        if (finrun_close(&files) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, messages, runs);
done:
    if (accounting)
        finrun_close(&files);
    /* on an error the FINs taken so far stay taken: their flights' counts may be off,
     * which only delays a timer entry's disarm (the flight then fires empty) */
    Py_XDECREF(flight);
    Py_XDECREF(messages);
    Py_XDECREF(runs);
    PyBuffer_Release(&view);
    maybe_shrink(self);
    return result;
}

PyDoc_STRVAR(entries_doc,
"entries()\n--\n\n"
"Every (message, attempts, flight) in flight, in no particular order.");

static PyObject *
Map_entries(MapObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *result = PyList_New(0);
    if (result == NULL)
        return NULL;
    const table_t *tables[2] = {&self->cur, &self->old};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; tables[k]->slots != NULL && i < tables[k]->cap; i++) {
            if (!occupied(&tables[k]->slots[i]) || is_stale(self, &tables[k]->slots[i]))
                continue;
            PyObject *t = entry_tuple(&tables[k]->slots[i]);
            if (t == NULL || PyList_Append(result, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(result);
                return NULL;
            }
            Py_DECREF(t);
        }
    }
    return result;
}

PyDoc_STRVAR(clear_doc, "clear()\n--\n\nNothing is in flight any more.");

static PyObject *
Map_clear_method(MapObject *self, PyObject *Py_UNUSED(ignored))
{
    Map_clear(self);
    Py_RETURN_NONE;
}

static PyMethodDef Map_methods[] = {
    {"get", (PyCFunction)Map_get, METH_O, get_doc},
    {"put", (PyCFunction)(void (*)(void))Map_put, METH_FASTCALL, put_doc},
    {"remove", (PyCFunction)Map_remove, METH_O, remove_doc},
    {"move", (PyCFunction)(void (*)(void))Map_move, METH_FASTCALL, move_doc},
    {"fly", (PyCFunction)(void (*)(void))Map_fly, METH_FASTCALL, fly_doc},
    {"land", (PyCFunction)(void (*)(void))Map_land, METH_FASTCALL, land_doc},
    {"expire", (PyCFunction)(void (*)(void))Map_expire, METH_FASTCALL, expire_doc},
    {"forget", (PyCFunction)Map_forget, METH_O, forget_doc},
    {"alive", (PyCFunction)(void (*)(void))Map_alive, METH_FASTCALL, alive_doc},
    {"finish", (PyCFunction)(void (*)(void))Map_finish, METH_FASTCALL, finish_doc},
    {"entries", (PyCFunction)Map_entries, METH_NOARGS, entries_doc},
    {"clear", (PyCFunction)Map_clear_method, METH_NOARGS, clear_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Map_get_stale(MapObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->stale);
}

static PyGetSetDef Map_getset[] = {
    {"stale", (getter)Map_get_stale, NULL,
     "Slots kept for timed-out messages not yet in flight again (memory only: never counted).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Map_as_sequence = {
    .sq_length = (lenfunc)Map_length,
    .sq_contains = (objobjproc)Map_contains,
};

PyDoc_STRVAR(Map_doc,
"InFlightMap()\n--\n\n"
"A channel's messages in flight: message id -> (message, attempts, flight).\n"
"It holds nsqmp._native Message and Flight objects only (read from their\n"
"structs): any other message or flight handed to it raises TypeError.");

static PyTypeObject Map_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsqmp._native.InFlightMap",
    .tp_basicsize = sizeof(MapObject),
    .tp_dealloc = (destructor)Map_dealloc,
    .tp_as_sequence = &Map_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = Map_doc,
    .tp_traverse = (traverseproc)Map_traverse,
    .tp_clear = (inquiry)Map_clear,
    .tp_methods = Map_methods,
    .tp_getset = Map_getset,
    .tp_new = Map_new,
};

int
nsqmp_inflight_add(PyObject *module)
{
    if (str_popleft == NULL) {
        str_popleft = PyUnicode_InternFromString("popleft");
        str_append = PyUnicode_InternFromString("append");
        str_extend = PyUnicode_InternFromString("extend");
        if (str_popleft == NULL || str_append == NULL || str_extend == NULL)
            return -1;
    }
    if (PyType_Ready(&Map_Type) < 0 || PyType_Ready(&nsqmp_Flight_Type) < 0)
        return -1;
    if (PyModule_AddType(module, &nsqmp_Flight_Type) < 0)  /* flight.c: this map is its only reader */
        return -1;
    return PyModule_AddType(module, &Map_Type);
}
