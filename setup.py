"""Build the C core (native/) as the extension module nsqmp._native, and the bench client
(native/bench/) as nsqmp.bench._client, apart from the broker."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "nsqmp._native",
            sources=["native/module.c", "native/layouts.c", "native/flight.c",
                     "native/ring.c", "native/heap.c", "native/parser.c",
                     "native/publish.c", "native/readback.c", "native/acklog.c",
                     "native/inflight.c", "native/finrun.c", "native/timerfd.c", "native/pubrun.c",
                     "native/ids.c", "native/segtail.c", "native/coalesce.c",
                     "native/readpath.c", "native/spin.c"],
            depends=["native/ring.h", "native/heap.h", "native/parser.h", "native/publish.h",
                     "native/readback.h", "native/message.h", "native/layouts.h", "native/flight.h",
                     "native/finrun.h", "native/pubrun.h", "native/ids.h", "native/segtail.h"],
            include_dirs=["native"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
        ),
        Extension(
            # the supervisor's death, known to its children before its memory is freed
            "nsqmp.supervisor._lifeline",
            sources=["native/lifeline/lifeline.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=gnu11", "-pthread"],
        ),
        Extension(
            "nsqmp.bench._client",
            sources=["native/bench/client.c"],
            depends=["native/layouts.h"],
            include_dirs=["native"],  # layouts.h: the frames it reads
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
        ),
    ]
)
