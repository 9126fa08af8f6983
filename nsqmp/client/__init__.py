"""The project's one NSQ client: wire encoding (wire), a blocking connection (sync).

Tests, the bench tool, the load test and the Spark connector all use this module; nothing
else re-implements the client side of the wire format.
"""
from nsqmp.client.sync import Connection, Frame, NSQError
from nsqmp.client.wire import Message

__all__ = ["Connection", "Frame", "Message", "NSQError"]
