"""The trio server: listeners, connections, and graceful shutdown.

Rules:
- ``serve(config, task_status=...)`` binds every listener (``listeners``; by default one PLAINTEXT listener
  on ``host``:``port``) and the metrics port unless -1, then reports ``Bound(port, metrics_port, ...,
  ports)`` through ``task_status.started`` so tests can start it on port 0 (``port``: the first listener's).
  Each accepted connection gets its listener's ``ListenerSecurity`` (TLS, SASL; None for PLAINTEXT).
- ``run`` prints one ``groupcoord listener NAME (PROTOCOL) on host:port`` line per listener after the first,
  then ``groupcoord listening on host:port`` for the first (what scripts and tests wait for). SIGHUP reads
  the TLS certificate files again (``TlsContexts.reload``): new connections get them, open ones keep theirs.
- Accept errors from resource exhaustion (EMFILE, ENFILE, ENOBUFS, ENOMEM) are logged and retried after a
  short sleep; connections beyond ``max.connections`` or their address's limit are closed at once
  (connection_limits.py).
- Shutdown (cancelling ``serve`` or SIGTERM/SIGINT via ``run``): stop accepting at once, leave the cluster
  (cluster mode: this node's leaderships move to other in-sync replicas; what waits for them here is answered
  with a retriable error), give open connections ``shutdown.grace.ms`` to finish in-flight requests, then
  cancel them, flush and close storage.
"""

from __future__ import annotations

import errno
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from coordinator.config import Config
from coordinator.core.security.listeners import listener_specs
from coordinator.metrics import Metrics
from coordinator.runtime.broker import Broker
from coordinator.runtime.connection import Connection
from coordinator.runtime.security.listener_security import ListenerSecurity
from coordinator.storage_errors import StartupError

log = logging.getLogger("groupcoord.server")

_ACCEPT_RETRY = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


@dataclass(frozen=True, slots=True)
class Bound:
    port: int  # the first listener's
    metrics_port: int | None
    shutdown: Callable[[], None]
    ports: dict[str, int] = field(default_factory=dict)  # every listener's bound port, by name
    reload_tls: Callable[[], None] = lambda: None  # SIGHUP: read the certificate files again


async def _accept_loop(listener: trio.SocketListener, broker: Broker, nursery: trio.Nursery,
                       security: ListenerSecurity | None, name: str) -> None:
    while True:
        try:
            stream = await listener.accept()
        except trio.ClosedResourceError:  # shutdown closed the listener before this task saw its cancellation
            return
        except OSError as e:
            if e.errno in _ACCEPT_RETRY:
                log.error("accept failed (%s); retrying in 100 ms", e)
                await trio.sleep(0.1)
                continue
            raise
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            host, peer = "?", "?:?"
        if not broker.limits.admit(host, len(broker.connections)):
            await stream.aclose()
            continue
        conn = Connection(stream, broker, peer, security, name)
        broker.connection_opened(conn)
        nursery.start_soon(conn.run)


async def serve(config: Config, *, task_status: trio.TaskStatus[Bound] = trio.TASK_STATUS_IGNORED) -> None:
    metrics = Metrics()
    broker = Broker(config, metrics)
    await broker.start()
    listeners: list[trio.SocketListener] = []
    bound: list[tuple[trio.SocketListener, ListenerSecurity | None, str]] = []
    ports: dict[str, int] = {}
    try:
        for spec in broker.listener_specs:
            try:
                opened = await trio.open_tcp_listeners(spec.port, host=spec.host or None)
            except OSError as e:
                raise StartupError(f"cannot listen on {spec.host}:{spec.port} (listener {spec.name}): {e}") from None
            listeners.extend(opened)
            sec = broker.listener_security.get(spec.name)
            bound.extend((one, sec, spec.name) for one in opened)
            ports[spec.name] = opened[0].socket.getsockname()[1]
    except StartupError:
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()
            await broker.stop()
        raise
    port = ports[broker.listener_specs[0].name]
    broker.set_bound_ports(ports)
    metrics_port = None
    if config["metrics.port"] >= 0:
        try:
            metrics_port = metrics.serve(config["metrics.host"], config["metrics.port"])
        except OSError as e:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()
                await broker.stop()
            raise StartupError(f"cannot serve metrics on {config['metrics.host']}:{config['metrics.port']}: "
                               f"{e}") from None
    for spec in broker.listener_specs:
        log.info("groupcoord node %s listener %s (%s) on %s:%s", broker.node_id, spec.name, spec.protocol,
                 spec.host, ports[spec.name])
    log.info("metrics: %s", metrics_port)
    try:
        async with trio.open_nursery() as conn_nursery, broker.running(conn_nursery):
            accept_scope = trio.CancelScope()

            async def accept_all() -> None:
                with accept_scope:
                    async with trio.open_nursery() as accept_nursery:
                        for listener, sec, name in bound:
                            accept_nursery.start_soon(_accept_loop, listener, broker, conn_nursery, sec, name)

            conn_nursery.start_soon(accept_all)
            task_status.started(Bound(port, metrics_port, broker.shutdown_requested.set, ports,
                                      broker.reload_tls))
            await broker.shutdown_requested.wait()
            accept_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            await broker.leave_cluster()  # cluster mode: leaderships move before the drain
            with trio.move_on_after(config["shutdown.grace.ms"] / 1000):
                await broker.wait_idle()
            conn_nursery.cancel_scope.cancel()
    finally:
        metrics.close()
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()
            await broker.stop()


async def run(config: Config) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully within shutdown.grace.ms."""
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve, config)
        specs = listener_specs(config)  # type: ignore[arg-type]
        for spec in specs[1:]:  # before the line tools wait for: the first listener's
            print(f"groupcoord listener {spec.name} ({spec.protocol}) on {spec.host}:{bound.ports[spec.name]}",
                  flush=True)
        print(f"groupcoord listening on {specs[0].host}:{bound.port}"
              + (f", metrics on http://{config['metrics.host']}:{bound.metrics_port}/metrics"
                 if bound.metrics_port else ""), flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:  # new certificate files; connections already open keep theirs
                    bound.reload_tls()
                    continue
                log.info("received %s; shutting down", signal.Signals(signum).name)
                break
        bound.shutdown()
