/*
 * timerfd.c -- a CLOCK_MONOTONIC timerfd for the timer process's wake-ups.
 *
 * The event loop's own timers (libuv) count whole milliseconds from a clock
 * read once per loop iteration, so a wake-up planned with them comes 0-1 ms
 * after its deadline, 0.6 ms on average.  A timerfd armed at the deadline's
 * absolute nanosecond becomes readable within the kernel's timer slack (50 us
 * by default); the loop watches it like a socket.  Python 3.11 has no
 * os.timerfd_create (3.13 has), hence these three functions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* fd as an int; -1 with an exception */
static int
fd_of(PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return -1;
    }
    return (int)fd;
}

PyDoc_STRVAR(timerfd_open_doc,
"timerfd_open() -> int\n\n"
"A new non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC (the clock of\n"
"time.monotonic_ns), disarmed.  The caller closes it with os.close.");

static PyObject *
timerfd_open(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(fd);
}

PyDoc_STRVAR(timerfd_arm_doc,
"timerfd_arm(fd, deadline_ns, /)\n--\n\n"
"Make fd readable at deadline_ns (absolute, time.monotonic_ns); a deadline\n"
"already past makes it readable at once.  0 disarms.  Replaces any earlier\n"
"setting.");

static PyObject *
timerfd_arm(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "timerfd_arm() takes exactly 2 arguments");
        return NULL;
    }
    int fd = fd_of(args[0]);
    if (fd < 0)
        return NULL;
    long long deadline = PyLong_AsLongLong(args[1]);
    if (deadline == -1 && PyErr_Occurred())
        return NULL;
    if (deadline < 0) {
        PyErr_SetString(PyExc_ValueError, "deadline_ns must not be negative");
        return NULL;
    }
    /* it_value 0 disarms; a deadline of 1 ns is long past, so it fires at once */
    struct itimerspec spec = {
        .it_interval = {0, 0},
        .it_value = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)},
    };
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(timerfd_clear_doc,
"timerfd_clear(fd, /) -> int\n--\n\n"
"Consume fd's expirations; how many there were (0 when it was not readable).");

static PyObject *
timerfd_clear(PyObject *Py_UNUSED(module), PyObject *arg)
{
    int fd = fd_of(arg);
    if (fd < 0)
        return NULL;
    uint64_t expirations = 0;
    ssize_t got = read(fd, &expirations, sizeof expirations);
    if (got < 0) {
        if (errno == EAGAIN)
            return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromUnsignedLongLong(expirations);
}

static PyMethodDef timerfd_methods[] = {
    {"timerfd_open", timerfd_open, METH_NOARGS, timerfd_open_doc},
    {"timerfd_arm", (PyCFunction)(void (*)(void))timerfd_arm, METH_FASTCALL, timerfd_arm_doc},
    {"timerfd_clear", timerfd_clear, METH_O, timerfd_clear_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_timerfd_add(PyObject *module)
{
    return PyModule_AddFunctions(module, timerfd_methods);
}
