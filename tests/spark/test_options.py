"""Options of the nsq data source: parsing and the error texts (no Spark, no broker)."""
from __future__ import annotations

import pytest

from nsqmp.spark.options import (
    NSQOptionError,
    parse_addresses,
    read_options,
    write_options,
)

BASE = {"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c"}


def test_addresses_several_and_deduplicated():
    assert parse_addresses(" 127.0.0.1:4150, localhost:4250 ,127.0.0.1:4150") == (
        "127.0.0.1:4150", "localhost:4250")


@pytest.mark.parametrize("raw", ["nope", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", ":4150"])
def test_bad_address_names_it(raw):
    with pytest.raises(NSQOptionError, match=r"option nsqd: bad address .*expected host:port"):
        parse_addresses(raw)


def test_missing_options_are_named():
    with pytest.raises(NSQOptionError, match="option nsqd is required"):
        read_options({"topic": "t", "channel": "c"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option topic is required"):
        read_options({"nsqd": "127.0.0.1:4150", "channel": "c"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option channel is required"):
        read_options({"nsqd": "127.0.0.1:4150", "topic": "t"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option topic is required"):
        write_options({"nsqd": "127.0.0.1:4150"})


def test_invalid_names_and_numbers():
    with pytest.raises(NSQOptionError, match="'a b' is not a valid NSQ topic name"):
        read_options({**BASE, "topic": "a b"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option maxMessagesPerBatch must be an integer, got 'lots'"):
        read_options({**BASE, "maxmessagesperbatch": "lots"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option msgTimeoutMs must be between 1000 and 900000, got 999999"):
        read_options({**BASE, "msgTimeoutMs": "999999"}, streaming=True)
    with pytest.raises(NSQOptionError, match="option ack must be 'fin' or 'requeue'"):
        read_options({**BASE, "ack": "maybe"}, streaming=False)


def test_keys_are_case_insensitive_as_spark_lowercases_them():
    o = read_options({**BASE, "maxmessagesperbatch": "10000", "MSGTIMEOUTMS": "60000"}, streaming=True)
    assert o.max_messages_per_batch == 10000
    assert o.msg_timeout_ms == 60000


def test_in_flight_window_follows_the_batch_limit():
    o = read_options({**BASE, "maxMessagesPerBatch": "10000"}, streaming=True)
    assert o.max_in_flight == 20000            # one batch held, the next one filling
    assert o.connections_per_nsqd == 8         # RDY 2500 each (nsqd's max-rdy-count)
    assert o.batch_cap == 10000
    two = read_options({**BASE, "nsqd": "127.0.0.1:4150,127.0.0.1:4250", "maxMessagesPerBatch": "10000"},
                       streaming=True)
    assert two.max_in_flight == 10000          # per address
    default = read_options(BASE, streaming=True)
    assert default.max_messages_per_batch is None
    assert default.batch_cap == default.max_in_flight // 2


def test_batch_larger_than_the_window_is_refused():
    with pytest.raises(NSQOptionError, match=r"maxMessagesPerBatch \(5000\) is larger than what can be in flight"):
        read_options({**BASE, "maxMessagesPerBatch": "5000", "maxInFlight": "4000"}, streaming=True)
    with pytest.raises(NSQOptionError, match="more than 100 connections"):
        read_options({**BASE, "maxMessagesPerBatch": "1000000"}, streaming=True)


def test_write_defaults():
    o = write_options({"nsqd": "127.0.0.1:4150", "topic": "t"})
    assert o.column is None
    assert o.max_message_size == 1048576
    assert o.max_body_size == 5242880
