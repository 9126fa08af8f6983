"""nsqlookupd for nsqmp: the discovery service brokers register with and consumers ask.

One asyncio process on uvloop, no state on disk (everything is rebuilt from the brokers'
registrations). Modules:

* ``registry`` -- the registration DB: (category, key, subkey) -> producers, tombstones.
* ``tcp``      -- the TCP protocol V1 brokers speak (IDENTIFY, REGISTER, UNREGISTER, PING).
* ``http``     -- the HTTP API consumers and admins use (/lookup, /topics, /nodes, ...).
* ``options``  -- every flag declared once; nsqlookupd's command line in Go flag syntax.
* ``server``   -- binding, start-up lines, signals and the shutdown sequence.
* ``cli``      -- ``nsqmp lookupd`` and the ``nsqmp-nsqlookupd`` drop-in.
* ``launcher`` -- start one as a subprocess (tests, ``nsqmp/bench/lookupd.py``, examples).
"""

VERSION = "1.3.0"  # the nsqlookupd version we answer as (/info, IDENTIFY, --version)


def version_string() -> str:
    """``nsqlookupd v1.3.0 (built w/nsqmp-0.1.0-python3.11.9)``: nsqlookupd's format, so
    tools and test harnesses that parse nsqlookupd's --version keep working."""
    from nsqmp.version import version_line

    return version_line("nsqlookupd", VERSION)
