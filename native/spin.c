/*
 * spin.c -- spin_read(fd, loop_fd, max_ns): the busy poll's look at the
 * socket of the acceptor's last publisher, in C.
 *
 * A publisher on one connection sends its next PUB a few microseconds after
 * our OK reaches it.  Go's runtime (go-nsq, nsq's bench_writer) looks for that
 * OK for about 3 us after its write before its thread sleeps; an OK later than
 * that costs it a sleep and a wake-up of its virtual CPU (20 us and more here).
 * The event loop's own poll (a Python tick, epoll with a zero timeout, uvloop's
 * read) takes 3-4 us from the PUB's arrival to our write; this takes about one.
 *
 * It loops, for up to max_ns: recv(fd, MSG_DONTWAIT); the bytes, if any came,
 * go back to the caller (who hands them to the connection, as the loop would
 * have).  Anything else on the event loop's epoll set (loop_fd: another
 * connection, a ring's doorbell, the listener) ends the spin at once, so the
 * other connections wait for no spin: the loop registers its fds level-
 * triggered, so looking at its set does not take their events (libuv's
 * epoll backend, data.fd holding the fd).  End of stream and errors are not
 * taken either: None, and the loop sees them as it would have.  A publish
 * whose body is still coming (a client's buffered writer sends a big MPUB a few
 * KiB at a time) is read on to its end, within the time: the connection gets it
 * whole, as from the loop's read after its turn, not piece by piece.  It holds the
 * GIL (its buffer is static): its one caller is the acceptor's loop thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include "parser.h"

#define SPIN_READ_MAX 262144  /* as much as uvloop reads at once */
#define SPIN_LINE_MAX 512     /* a publish's line longer than this is not waited for */
static char spin_buf[SPIN_READ_MAX];

static long long
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Something other than fd is ready on the loop's epoll set (or the set is unusable). */
static int
loop_has_other(int loop_fd, int fd)
{
    struct epoll_event ev[8];
    int n = epoll_wait(loop_fd, ev, 8, 0);
    if (n < 0)
        return errno != EINTR;
    for (int i = 0; i < n; i++)
        if (ev[i].data.fd != fd)
            return 1;
    return 0;
}

/* The first command of p[0:n] is a publish whose line, size or body has not all come
 * (framed as the parser frames it; one longer than the buffer is not waited for). */
static int
publish_incomplete(const char *p, size_t n)
{
    if (!(n >= 4 && memcmp(p, "PUB ", 4) == 0) && !(n >= 5 && (memcmp(p, "MPUB ", 5) == 0
                                                               || memcmp(p, "DPUB ", 5) == 0)))
        return 0;
    nqp_frame f;
    nqp_error err;
    int rc = nqp_frame_next((const uint8_t *)p, n, 0, SPIN_LINE_MAX, INT64_MAX, INT64_MAX, &f, &err);
    if (rc == NQP_FRAME_NEED_MORE)
        return 1;
    if (rc != NQP_FRAME_OK || f.body_off != NQP_BODY_PENDING)
        return 0;  /* a line too long, a body whole or with a bad size: the parser's to answer */
    if (f.body_len < 0)  /* the size itself is still coming */
        return 1;
    size_t head = f.line_len + (p[f.line_len] == '\r') + 1;  /* the line and its \n */
    return head + 4 + (size_t)f.body_len <= SPIN_READ_MAX;
}

PyDoc_STRVAR(spin_read_doc,
"spin_read(fd, loop_fd, max_ns)\n--\n\n"
"Look for bytes on socket fd without blocking for up to max_ns, or until another fd\n"
"of the epoll set loop_fd (-1: none) is ready: the bytes read, or None. A publish\n"
"whose body comes in pieces is read whole (within the time).");

static PyObject *
py_spin_read(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "spin_read(fd, loop_fd, max_ns)");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]), loop_fd = PyLong_AsLong(args[1]);
    long long max_ns = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    long long until = now_ns() + max_ns;
    size_t have = 0;
    for (;;) {
        ssize_t r = recv((int)fd, spin_buf + have, SPIN_READ_MAX - have, MSG_DONTWAIT);
        if (r > 0) {
            /* a client's buffered writer sends a big MPUB 4 KiB at a time: what the
             * loop would read at once after its turn, read here as it comes */
            have += (size_t)r;
            if (!publish_incomplete(spin_buf, have))
                return PyBytes_FromStringAndSize(spin_buf, (Py_ssize_t)have);
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            break;  /* end of stream, an error: the loop's to see (after what came) */
        }
        if (now_ns() >= until || (have == 0 && loop_fd >= 0 && loop_has_other((int)loop_fd, (int)fd)))
            break;
    }
    if (have > 0)
        return PyBytes_FromStringAndSize(spin_buf, (Py_ssize_t)have);
    Py_RETURN_NONE;
}

static PyMethodDef spin_functions[] = {
    {"spin_read", (PyCFunction)(void (*)(void))py_spin_read, METH_FASTCALL, spin_read_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_spin_add(PyObject *module)
{
    return PyModule_AddFunctions(module, spin_functions);
}
