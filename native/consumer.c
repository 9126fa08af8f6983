/*
 * consumer.c -- the frame scanner of the bench reader (nsqmp/bench/tool.py),
 * so that the client is not what limits a drain.  Frames as nsqd writes them:
 * size i32 BE (of type + data), frame type i32 BE (0 response, 1 error,
 * 2 message), data; a message's data is timestamp i64 BE, attempts u16 BE,
 * id 16 bytes, body.  The pure-Python twin is nsqmp.client.wire.py_fin_replies.
 *
 *   fin_replies(buf) -> (replies, messages, consumed, error)
 *
 * Walks the whole frames at the start of buf: "FIN <id>\n" for each message,
 * "NOP\n" for each _heartbeat_ response.  Stops after an error frame (error =
 * its data) or at an incomplete frame; consumed = bytes of the frames walked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_HEAD 8
#define MSG_HEAD 26
#define FIN_LINE 21 /* "FIN " + 16 + "\n" */

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
        if (type == 2) {
            if (dlen < MSG_HEAD) {
                PyErr_Format(PyExc_ValueError, "message frame of %zd bytes", dlen);
                goto done;
            }
            memcpy(out + len, "FIN ", 4);
            memcpy(out + len + 4, data + 10, 16);
            out[len + 20] = '\n';
            len += FIN_LINE;
            messages++;
        } else if (type == 0) {
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

static PyMethodDef consumer_functions[] = {
    {"fin_replies", (PyCFunction)py_fin_replies, METH_O, fin_replies_doc},
    {NULL, NULL, 0, NULL},
};

int
nsqmp_consumer_add(PyObject *module)
{
    return PyModule_AddFunctions(module, consumer_functions);
}
