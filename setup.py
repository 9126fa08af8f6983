"""Build the C core (native/) as the extension module nsqmp._native."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "nsqmp._native",
            sources=["native/module.c", "native/layouts.c", "native/flight.c",
                     "native/ring.c", "native/heap.c", "native/parser.c",
                     "native/publish.c", "native/readback.c", "native/acklog.c",
                     "native/benchclient.c", "native/inflight.c", "native/timerfd.c"],
            depends=["native/ring.h", "native/heap.h", "native/parser.h", "native/publish.h",
                     "native/readback.h", "native/message.h", "native/layouts.h", "native/flight.h"],
            include_dirs=["native"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
        )
    ]
)
