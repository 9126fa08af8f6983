"""Files on disk: append-only segment files, a topic's ack log and its metadata.

Segments are written with pwrite into posix_fallocate'd space, not through a mapping
(segment.py gives the measured reason); the router reads queued records back with pread
(nsqmp/router/filequeue.py), and recovery scans a file through a read-only mapping. The
ack log is appended through a shared mapping (acklog.py). Imports nothing of nsqmp
outside this package except the C extension (nsqmp._native).
"""
