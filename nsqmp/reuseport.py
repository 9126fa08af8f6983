"""Steering an SO_REUSEPORT listening group: which of its sockets gets each new connection.

Shared by the supervisor, which chooses (nsqmp/supervisor/steering.py), and the
acceptors, which hand new connections back to the kernel's hash at once when they hold
PACK_MAX_CONNECTIONS or took STORM_CONNECTIONS in a burst. The program is classic BPF,
one instruction: return the index of the socket in the group (in the order the sockets
started listening); an index past the group's end makes the kernel fall back to its hash. A program attached through any
socket of the group applies to the whole group.
"""
from __future__ import annotations

import ctypes
import socket

# <asm-generic/socket.h>; Python's socket module does not name it
SO_ATTACH_REUSEPORT_CBPF = 51
_BPF_RET_K = 0x06  # BPF_RET | BPF_K: return the constant k
# A packed acceptor holding this many connections takes no more: a reconnection storm
# (every client of a restarted broker, within one of the supervisor's readings) spreads
# past it at once instead of all landing on one acceptor
PACK_MAX_CONNECTIONS = 64
# Nor one that took this many within STORM_SECONDS (the supervisor's shortest reading):
# a burst of clients (a restart, a deploy of many consumers) lands on one acceptor at
# most this deep before the kernel's hash spreads the rest, however few it holds in all.
# Above the 6 connections of `make bench`'s busiest row, which one acceptor serves best.
STORM_CONNECTIONS = 8
STORM_SECONDS = 0.2


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def attach_index(sock: socket.socket, index: int) -> None:
    """Make sock's SO_REUSEPORT group give every new connection to its socket number
    `index` (one past the end: the kernel's hash). Raises OSError if the kernel refuses."""
    program = (_SockFilter * 1)(_SockFilter(_BPF_RET_K, 0, 0, index))
    fprog = _SockFprog(1, program)
    # the kernel copies the program during the call, from the address in fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, bytes(fprog))
