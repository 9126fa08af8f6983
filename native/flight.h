/*
 * flight.h -- the router's Flight (bindings in flight.c; pure-Python twin in
 * nsqmp/router/pyinflight.py, same constructor and field names), read by
 * inflight.c straight from the struct: the map's finish() drops a flight's
 * live count and checks its consumer without looking a name up.
 *
 * The messages one delivery pass handed to one consumer: one deadline, one
 * timer entry.  A message leaves its flight when it is finished, requeued or
 * touched; the timer entry is disarmed when the last one has left.
 *
 *   PyObject_HEAD | token | consumer * | deadline | delivered | live | members *
 *
 *   Flight(token, consumer, deadline, delivered, live=0, members=None -> [])
 *
 * It takes part in cycle collection: a flight refers to its consumer, which
 * refers (through its channel) to the InFlightMap that holds the flight.
 */
#ifndef NSQMP_FLIGHT_H
#define NSQMP_FLIGHT_H

#include <Python.h>

typedef struct {
    PyObject_HEAD
    unsigned long long token;  /* its timer entry (u64, as in ARM records) */
    PyObject *consumer;   /* the Consumer it went to */
    long long deadline;   /* CLOCK_MONOTONIC ns */
    long long delivered;  /* CLOCK_MONOTONIC ns; TOUCH never moves deadline past delivered + max-msg-timeout */
    Py_ssize_t live;      /* members still in this flight */
    PyObject *members;    /* what it went out with, flat: Message, attempts, Message, attempts, ... */
} nsqmp_Flight;

extern PyTypeObject nsqmp_Flight_Type;

#define NSQMP_FLIGHT_CHECK(o) Py_IS_TYPE((o), &nsqmp_Flight_Type)

#endif
