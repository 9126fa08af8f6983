/* nsqmp.supervisor._lifeline: children learn of the supervisor's death before the kernel
 * has torn down its memory, and stop listening before their own is torn down.
 *
 * Why: after SIGKILL the kernel's do_exit frees the dying process's memory (exit_mm)
 * before it closes its files and before exit_notify sends the children their
 * PR_SET_PDEATHSIG. Freeing a Python process's pages takes milliseconds on a VM, so the
 * parent-death signal reaches the children 2-7 ms late, and each child then frees its own
 * memory before its listening sockets close: 9-21 ms idle, 15-57 ms under load, while
 * connections are still accepted. The robust futex list is walked at the very start of
 * exit_mm (futex_exit_release), before any page is freed: a robust mutex the supervisor
 * holds is marked OWNER_DIED and its waiter woken at once.
 *
 * Layout: one process-shared robust pthread mutex per child slot, SLOT_SIZE bytes apart,
 * in an anonymous MAP_SHARED mapping the supervisor creates before its first fork (so
 * every child inherits it and nothing is left in /dev/shm).
 *
 *   hold(buf, slots)          supervisor: initialise and lock every slot's mutex
 *   watch(buf, slot, fds)     child: a thread (all signals blocked, no Python) waits for
 *                             the slot's mutex; when the supervisor dies it shuts down the
 *                             sockets in fds (the listeners), then every TCP socket of the
 *                             process, then SIGKILLs its own process.
 *
 * PR_SET_PDEATHSIG=SIGKILL stays the guarantee (set by the child right after fork); this
 * is the fast path. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOT_SIZE 64

_Static_assert(sizeof(pthread_mutex_t) <= SLOT_SIZE, "a mutex must fit its slot");

/* the mapping stays exported (and so mapped) for the life of the process */
static Py_buffer held;
static int have_held;

struct watch {
    pthread_mutex_t *mutex;
    char *base;     /* the first slot */
    int slots;
    pid_t holder;   /* the supervisor */
    int nfirst;
    int first[];    /* every listening socket of the broker */
};

static int is_tcp(int fd)
{
    int domain = 0, type = 0;
    socklen_t len = sizeof(domain);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
        return 0;
    len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
        return 0;
    return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM;
}

/* Every TCP socket above stderr: client connections and lookupd connections get their FIN
 * now instead of after this process's exit_mm. shutdown, not close: the fd numbers stay
 * taken, so the main thread, still running for a few microseconds, cannot reuse them. */
static void shut_all_tcp(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return;
    int self = dirfd(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name);
        if (fd > 2 && fd != self && is_tcp(fd))
            shutdown(fd, SHUT_RDWR);
    }
    closedir(dir);
}

/* The shortest EEVDF slice (0.1 ms; kernel 6.12+, no privilege needed, see nsqmp/sched.py):
 * an earlier virtual deadline, so when woken this thread preempts a running task instead
 * of waiting for its slice to end (under load: the difference between 1 and 10 ms). */
static void ask_short_slice(void)
{
#ifdef SYS_sched_setattr
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
        uint32_t util_min, util_max;
    } attr;
    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.flags = 0x08; /* SCHED_FLAG_KEEP_POLICY */
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    attr.nice = errno ? 0 : nice;
    attr.runtime = 100000;
    syscall(SYS_sched_setattr, 0, &attr, 0); /* an older kernel refuses: the default slice */
#endif
}

/* Do for the other slots what the kernel's walk of the dead supervisor's robust list
 * does (handle_futex_death): a mutex still naming it as owner gets OWNER_DIED and its
 * waiter is woken. Why: the kernel wakes one waiter per mutex, in list order, and the
 * first watcher it wakes (short slice) may preempt the dying supervisor on its core;
 * the rest of the walk then waits milliseconds for that core (measured: 5-8 ms). The
 * word is glibc's __data.__lock, the first field of pthread_mutex_t on Linux: owner TID
 * in the low 30 bits, FUTEX_WAITERS, FUTEX_OWNER_DIED. The kernel skips a word whose
 * TID no longer matches, so each waiter is woken once either way. */
static void wake_others(struct watch *w)
{
    for (int s = 0; s < w->slots; s++) {
        _Atomic uint32_t *word = (_Atomic uint32_t *)(w->base + (size_t)s * SLOT_SIZE);
        if ((pthread_mutex_t *)word == w->mutex)
            continue;
        uint32_t v = atomic_load(word);
        while ((v & FUTEX_TID_MASK) == (uint32_t)w->holder) {
            uint32_t dead = (v & FUTEX_WAITERS) | FUTEX_OWNER_DIED;
            if (atomic_compare_exchange_weak(word, &v, dead)) {
                if (v & FUTEX_WAITERS)
                    syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
                break;
            }
        }
    }
}

static void *watch_main(void *arg)
{
    struct watch *w = arg;
    /* Woken, this thread must run now, not when a busy core's slice ends: as a real-time
     * (SCHED_FIFO) thread it preempts every ordinary task, the dying supervisor's teardown
     * included (it blocks until then and its work is a few syscalls per socket, so it
     * cannot hog a core). That takes CAP_SYS_NICE (root, or AmbientCapabilities= in the
     * unit); without it, the shortest EEVDF slice: a short slice, once used, waits behind
     * every runnable task's longer one, so the work must fit in one (it does). */
    struct sched_param rt = {.sched_priority = 1};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &rt) != 0)
        ask_short_slice();
    int rc = pthread_mutex_lock(w->mutex);
    if (rc != 0 && rc != EOWNERDEAD)
        return NULL; /* cannot watch: PR_SET_PDEATHSIG still ends us, later */
    /* the supervisor is dying: every listener of the broker first, whichever watcher runs
     * first (no handshake completes from here on, even if another child's watcher never
     * runs before the parent-death SIGKILL takes its process), then this process's
     * connections (a lookupd drops us on their FIN), then the others' watchers */
    for (int i = 0; i < w->nfirst; i++)
        shutdown(w->first[i], SHUT_RDWR);
    shut_all_tcp();
    if (rc == EOWNERDEAD)
        wake_others(w);
    kill(getpid(), SIGKILL);
    return NULL;
}

static pthread_mutex_t *slot_mutex(Py_buffer *view, Py_ssize_t slot)
{
    if (slot < 0 || (slot + 1) * SLOT_SIZE > view->len) {
        PyErr_SetString(PyExc_ValueError, "slot outside the lifeline mapping");
        return NULL;
    }
    return (pthread_mutex_t *)((char *)view->buf + slot * SLOT_SIZE);
}

static int keep(PyObject *buf)
{
    if (have_held)
        return 0;
    if (PyObject_GetBuffer(buf, &held, PyBUF_WRITABLE) != 0)
        return -1;
    have_held = 1;
    return 0;
}

static PyObject *hold(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf;
    Py_ssize_t slots;
    if (!PyArg_ParseTuple(args, "On", &buf, &slots))
        return NULL;
    if (keep(buf) != 0)
        return NULL;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    /* descending: glibc puts each lock at the head of the robust list and the kernel walks
     * it from the head, so slot 0 (acceptor 0, the one registered with lookupds) and the
     * other acceptors (the lower slots) are woken first */
    for (Py_ssize_t s = slots - 1; s >= 0; s--) {
        pthread_mutex_t *m = slot_mutex(&held, s);
        if (m == NULL)
            return NULL;
        int rc = pthread_mutex_init(m, &attr);
        if (rc == 0)
            rc = pthread_mutex_lock(m);
        if (rc != 0) {
            errno = rc;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    pthread_mutexattr_destroy(&attr);
    Py_RETURN_NONE;
}

static PyObject *watch(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf, *fds;
    Py_ssize_t slot;
    if (!PyArg_ParseTuple(args, "OnO", &buf, &slot, &fds))
        return NULL;
    if (keep(buf) != 0)
        return NULL;
    pthread_mutex_t *m = slot_mutex(&held, slot);
    if (m == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(fds, "fds must be a sequence of ints");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    struct watch *w = calloc(1, sizeof(*w) + (size_t)n * sizeof(int)); /* the thread's for ever */
    if (w == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    w->mutex = m;
    w->base = held.buf;
    w->slots = (int)(held.len / SLOT_SIZE);
    w->holder = getppid();
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (fd == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            free(w);
            return NULL;
        }
        w->first[w->nfirst++] = (int)fd;
    }
    Py_DECREF(seq);
    /* every signal stays with the main thread (Python's handlers, uvloop's wakeup fd) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t tid;
    int rc = pthread_create(&tid, &attr, watch_main, w);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        free(w);
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"hold", hold, METH_VARARGS,
     "hold(buf, slots): supervisor: initialise and lock one robust mutex per slot."},
    {"watch", watch, METH_VARARGS,
     "watch(buf, slot, fds): child: when the supervisor dies, shut down fds, then every TCP "
     "socket, then SIGKILL this process."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "nsqmp.supervisor._lifeline",
    "The supervisor's death, known to its children before its memory is freed.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lifeline(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "SLOT_SIZE", SLOT_SIZE) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
