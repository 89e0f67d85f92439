"""A guard on librdkafka's own log: every confluent-kafka client a test makes logs its protocol, fetch and
group debug lines into a list, and the test fails on any line that shows librdkafka could not parse what we
sent (a server bug it would otherwise only log: issue #26, Fetch with null records, was one).

Rules:
- ``install(monkeypatch, lines)`` makes ``confluent_kafka.Consumer``, ``Producer`` and ``AdminClient`` add
  ``debug`` and a ``logger`` to their config (subclasses of the two C types; AdminClient's own __init__).
  Tests import confluent-kafka inside the test function, after the fixture ran, so they get the guarded
  classes. A config that sets its own ``logger`` or ``debug`` keeps it (the guard still adds the other).
- librdkafka hands log lines to Python only while the client is polled (poll, consume, flush): the lines of
  a client a test never polls after the fault are not seen.
- ``worker_config(conf)`` is the same for a client in a subprocess: lines go to stderr with the ``GUARD``
  prefix, which ``hits(lines)`` finds again in the parent.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

BAD = ("Protocol parse failure", "PROTOERR", "invalid MessageSetSize")
DEBUG = "protocol,fetch,cgrp"
PREFIX = "GUARD librdkafka: "


class _Sink(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if any(b in msg for b in BAD):
            self.lines.append(msg)


def _logger(name: str, lines: list[str]) -> logging.Logger:
    logger = logging.Logger(f"rdkafka-guard.{name}", logging.DEBUG)  # not registered: one per client
    logger.addHandler(_Sink(lines))
    logger.propagate = False
    return logger


def guarded(conf: dict[str, Any] | None, lines: list[str], name: str) -> dict[str, Any]:
    conf = dict(conf or {})
    conf.setdefault("debug", DEBUG)
    conf.setdefault("logger", _logger(name, lines))
    return conf


def install(monkeypatch: Any, lines: list[str]) -> None:
    import confluent_kafka
    import confluent_kafka.admin

    def guarded_init(init: Any, name: str) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if args and isinstance(args[0], dict):
                args = (guarded(args[0], lines, name), *args[1:])
            else:
                kwargs = guarded(kwargs, lines, name)
            init(self, *args, **kwargs)

        return __init__

    # Consumer and Producer are C types (their attributes cannot be set): replace them with subclasses.
    for name in ("Consumer", "Producer"):
        cls = getattr(confluent_kafka, name)
        monkeypatch.setattr(confluent_kafka, name, type(name, (cls,), {
            "__init__": guarded_init(cls.__init__, name), "__module__": __name__}))
    # AdminClient is a Python class that names itself in super(): patch its __init__ in place.
    admin = confluent_kafka.admin.AdminClient
    monkeypatch.setattr(admin, "__init__", guarded_init(admin.__init__, "AdminClient"))


class _Stderr(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if any(b in msg for b in BAD):
            print(PREFIX + msg, file=sys.stderr, flush=True)


def worker_config(conf: dict[str, Any]) -> dict[str, Any]:
    """For a client in a subprocess: offending lines go to stderr, marked for ``hits``."""
    logger = logging.Logger("rdkafka-guard.worker", logging.DEBUG)
    logger.addHandler(_Stderr())
    logger.propagate = False
    return {**conf, "debug": DEBUG, "logger": logger}


def hits(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(PREFIX)]
