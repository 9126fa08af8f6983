/*
 * bench/client.c -- the extension module nsqmp.bench._client: the hot loops of
 * `nsqmp bench writer` and `nsqmp bench reader` (nsqmp/bench/tool.py), so that
 * the client is not what limits the broker being measured.  A module of its
 * own, apart from the broker's nsqmp._native (setup.py builds both).
 *
 *   publish_loop(fd, command, until) -> (oks, error, slowest)
 *
 * Sends command (a pre-encoded PUB or MPUB) on the blocking socket fd and
 * waits for its response frame, again and again until CLOCK_MONOTONIC passes
 * until (seconds, as time.monotonic(): a step of the wall clock cannot stretch
 * a run); the GIL is released meanwhile.  oks = how
 * many OK responses came; a response that is not OK stops the loop (error =
 * its frame type and data); slowest = the longest wait for an OK, in seconds
 * (a broker that stalls shows there).  A heartbeat that comes before a
 * response is answered with NOP and skipped, as go-nsq's producer does.  The pure-Python twin is
 * nsqmp.bench.tool.py_publish_loop.
 *
 * Frames and the message header are drawn in native/layouts.h (NQL_FRAME_*,
 * NQL_MESSAGE_HEAD).  The pure-Python twin is nsqmp.client.wire.py_fin_replies.
 *
 *   fin_replies(buf) -> (replies, messages, consumed, error)
 *
 * Walks the whole frames at the start of buf: "FIN <id>\n" for each message,
 * "NOP\n" for each _heartbeat_ response.  Stops after an error frame (error =
 * its data) or at an incomplete frame; consumed = bytes of the frames walked.
 */
#define _POSIX_C_SOURCE 200809L
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "layouts.h"

#define FRAME_HEAD NQL_FRAME_HEAD
#define MSG_HEAD NQL_MESSAGE_HEAD
#define FIN_LINE 21 /* "FIN " + 16 + "\n" */
#define HEARTBEAT "_heartbeat_"
#define HEARTBEAT_LEN 11

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

PyDoc_STRVAR(fin_replies_doc,
"fin_replies(buf) -> (replies, messages, consumed, error)\n\n"
"A FIN line for every message frame and NOP for every heartbeat among the whole\n"
"frames at the start of buf; stops after an error frame (error = its data, else None).");

static PyObject *
py_fin_replies(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len, pos = 0, messages = 0;
    PyObject *error = NULL, *replies = NULL, *result = NULL;
    /* at most one reply per frame, and a frame is at least FRAME_HEAD bytes */
    char *out = PyMem_Malloc((size_t)(n / FRAME_HEAD + 1) * FIN_LINE);
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t len = 0;
    while (n - pos >= FRAME_HEAD) {
        int32_t size = (int32_t)be32(p + pos);
        uint32_t type = be32(p + pos + 4);
        if (size < 4) {  /* negative sizes too, as the twin's signed read sees them */
            PyErr_Format(PyExc_ValueError, "bad frame size %d at %zd", (int)size, pos);
            goto done;
        }
        if ((uint64_t)(n - pos) < 4 + (uint64_t)size)
            break;
        const unsigned char *data = p + pos + FRAME_HEAD;
        Py_ssize_t dlen = (Py_ssize_t)size - 4;
        pos += 4 + (Py_ssize_t)size;
        if (type == NQL_FRAME_MESSAGE) {
            if (dlen < MSG_HEAD) {
                PyErr_Format(PyExc_ValueError, "message frame of %zd bytes", dlen);
                goto done;
            }
            memcpy(out + len, "FIN ", 4);
            memcpy(out + len + 4, data + NQL_ID_AT, NQL_ID);
            out[len + 20] = '\n';
            len += FIN_LINE;
            messages++;
        } else if (type == NQL_FRAME_RESPONSE) {
            if (dlen == 11 && memcmp(data, "_heartbeat_", 11) == 0) {
                memcpy(out + len, "NOP\n", 4);
                len += 4;
            }
        } else {
            error = PyBytes_FromStringAndSize((const char *)data, dlen);
            if (error == NULL)
                goto done;
            break;
        }
    }
    replies = PyBytes_FromStringAndSize(out, len);
    if (replies == NULL)
        goto done;
    result = Py_BuildValue("(NnnO)", replies, messages, pos, error ? error : Py_None);
    replies = NULL;
done:
    Py_XDECREF(replies);
    Py_XDECREF(error);
    PyMem_Free(out);
    PyBuffer_Release(&view);
    return result;
}

/* all of p[0..n) sent, or -1 with errno */
static int
send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* exactly n bytes, or -1 with errno (ECONNRESET for an early end of stream) */
static int
recv_all(int fd, char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (k == 0) {
            errno = ECONNRESET;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static double
mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

PyDoc_STRVAR(publish_loop_doc,
"publish_loop(fd, command, until) -> (oks, error, slowest)\n\n"
"Send command and wait for its response on the blocking socket fd until\n"
"time.monotonic() passes until; error = (frame type, data) of a response that was not OK;\n"
"slowest = the longest wait for an OK (seconds).");

static PyObject *
py_publish_loop(PyObject *Py_UNUSED(module), PyObject *args)
{
    int fd;
    Py_buffer cmd;
    double until;
    if (!PyArg_ParseTuple(args, "iy*d:publish_loop", &fd, &cmd, &until))
        return NULL;
    long long oks = 0;
    int failed = 0, saved_errno = 0;
    uint32_t bad_type = 0;
    char head[NQL_FRAME_HEAD], small[64];
    char *data = NULL;
    Py_ssize_t dlen = 0;
    double slowest = 0.0;
    Py_BEGIN_ALLOW_THREADS
    double now = mono_now();
    while (now < until) {
        if (send_all(fd, cmd.buf, (size_t)cmd.len) < 0) {
            failed = 1;
            saved_errno = errno;
            break;
        }
        /* the command's response; a heartbeat before it is answered with NOP and
         * skipped (nsqd sends one every interval, however busy the connection) */
        for (;;) {
            if (recv_all(fd, head, NQL_FRAME_HEAD) < 0) {
                failed = 1;
                saved_errno = errno;
                goto out;
            }
            int32_t size = (int32_t)be32((const unsigned char *)head);
            uint32_t type = be32((const unsigned char *)head + 4);
            if (size < 4 || size > (1 << 24)) {
                failed = 2;
                goto out;
            }
            dlen = size - 4;
            data = dlen <= (Py_ssize_t)sizeof(small) ? small : malloc((size_t)dlen);
            if (data == NULL || recv_all(fd, data, (size_t)dlen) < 0) {
                failed = data == NULL ? 3 : 1;
                saved_errno = errno;
                goto out;
            }
            if (type == 0 && dlen == HEARTBEAT_LEN && memcmp(data, HEARTBEAT, HEARTBEAT_LEN) == 0) {
                data = NULL;  /* small: nothing to free */
                if (send_all(fd, "NOP\n", 4) < 0) {
                    failed = 1;
                    saved_errno = errno;
                    goto out;
                }
                continue;
            }
            bad_type = type;
            break;
        }
        if (bad_type != 0 || dlen != 2 || memcmp(data, "OK", 2) != 0)
            break;  /* data kept for the error */
        oks++;
        data = NULL;
        double after = mono_now();  /* the one clock read per round trip, as before */
        if (after - now > slowest)
            slowest = after - now;
        now = after;
    }
out:
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&cmd);
    PyObject *result = NULL;
    if (failed == 1) {
        errno = saved_errno;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (failed == 2) {
        PyErr_SetString(PyExc_ValueError, "bad response frame size");
    } else if (failed == 3) {
        PyErr_NoMemory();
    } else if (data != NULL) {
        result = Py_BuildValue("(L(Iy#)d)", oks, bad_type, data, dlen, slowest);
    } else {
        result = Py_BuildValue("(LOd)", oks, Py_None, slowest);
    }
    if (data != NULL && data != small)
        free(data);
    return result;
}

static PyMethodDef benchclient_functions[] = {
    {"fin_replies", (PyCFunction)py_fin_replies, METH_O, fin_replies_doc},
    {"publish_loop", (PyCFunction)py_publish_loop, METH_VARARGS, publish_loop_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef client_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nsqmp.bench._client",
    .m_doc = "The bench client's hot loops (nsqmp bench writer/reader); not part of the broker.",
    .m_size = 0,
    .m_methods = benchclient_functions,
};

PyMODINIT_FUNC
PyInit__client(void)
{
    return PyModuleDef_Init(&client_module);
}
