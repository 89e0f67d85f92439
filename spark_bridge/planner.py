"""Driver-side planning: which partitions a read covers, their offsets, and the ranges tasks will fetch.

Rules:
- Only the driver (the batch reader's ``partitions()``, the stream reader's offset methods) uses a
  ``Planner``; its connections open on first use. Workers never plan: they fetch the ranges given to them.
- The first request names the bootstrap servers when none answers: "cannot reach the bootstrap server(s)
  ...". A subscribed or assigned topic that does not exist is an error naming it (topics are never
  auto-created by a read); a pattern matching nothing yields no partitions.
- Offsets: a spec (``earliest``, ``latest``, JSON with -2/-1) or a timestamp resolves to concrete offsets
  with ListOffsets; a timestamp later than every record resolves to the log end.
- Ranges: one per partition, ``[start, end)``, empty ones dropped; with ``minPartitions`` larger than the
  number of ranges, big ranges are cut into parts in proportion to their size (Spark's
  KafkaOffsetRangeCalculator). A read limit of N rows is shared in proportion to what each partition has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from client.cluster import Cluster
from client.consumer_protocol import TopicPartition
from client.errors import AuthenticationError, KafkaConnectionError, KafkaError, error_for
from client.offsets import LIST_OFFSETS, list_offsets_body, parse_list_offsets
from client.security import SecurityConfig
from spark_bridge.options import EARLIEST, LATEST, OffsetSpec, OptionsError, ReadOptions

Offsets = dict[TopicPartition, int]


class PlanningError(ValueError):
    """The options are well-formed but the cluster cannot serve them (unreachable, missing topic...)."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class Planner:
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cluster: Cluster | None = None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.opts.bootstrap, client_id=self.opts.client_id,
                                    request_timeout_ms=self.opts.request_timeout_ms, connect_timeout_ms=5000,
                                    security=self.opts.security)
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __getstate__(self) -> dict[str, object]:
        return {"opts": self.opts, "_cluster": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.opts = state["opts"]  # type: ignore[assignment]
        self._cluster = None

    # ------------------------------------------------------------------ partitions
    def _metadata(self, topics: Iterable[str] | None) -> dict[str, int]:
        """topic -> partition count for the topics the cluster knows (all topics when ``topics`` is None)."""
        try:
            seen = self.cluster.refresh_metadata(topics)
        except KafkaConnectionError as e:
            self.close()
            raise PlanningError(f"cannot reach the bootstrap server(s) {self.opts.bootstrap}: {e}") from None
        return {n: len(t.partitions) for n, t in seen.items() if t.error_code == 0 and not n.startswith("__")}

    def partitions(self, *, missing_ok: bool = False) -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted. Missing topics raise unless ``missing_ok``."""
        o = self.opts
        if o.pattern is not None:
            regex = re.compile(o.pattern)
            counts = {t: n for t, n in self._metadata(None).items() if regex.fullmatch(t)}
            return sorted(TopicPartition(t, p) for t, n in counts.items() for p in range(n))
        wanted = list(o.subscribe) if o.subscribe else list(o.assign)
        counts = self._metadata(wanted)
        missing = [t for t in wanted if t not in counts]
        if missing and not missing_ok:
            raise PlanningError(f"topic(s) {', '.join(missing)} do not exist on {o.bootstrap} "
                                f"({o.subscription()})")
        if o.subscribe:
            return sorted(TopicPartition(t, p) for t in wanted if t in counts for p in range(counts[t]))
        out = []
        for t, ps in o.assign.items():
            for p in ps:
                if t in counts and p < counts[t]:
                    out.append(TopicPartition(t, p))
                elif not missing_ok:
                    raise PlanningError(f"partition {t}-{p} does not exist ({t} has {counts.get(t, 0)} partitions)")
        return sorted(out)

    # ------------------------------------------------------------------ offsets
    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> Offsets:
        """ListOffsets at each leader; a timestamp with no record at or after it gives the log end."""
        if not timestamps:
            return {}
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, ts in timestamps.items():
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                self._metadata({tp.topic})
                leader = self.cluster.leader_for(tp.topic, tp.partition)
                if leader is None:
                    raise PlanningError(f"partition {tp.topic}-{tp.partition} has no leader (does it exist?)")
            by_leader.setdefault(leader, {})[tp] = ts
        found: Offsets = {}
        for leader, part in by_leader.items():
            try:
                _, resp = self.cluster.connection(leader).send(LIST_OFFSETS, list_offsets_body(part))
            except KafkaConnectionError as e:
                raise PlanningError(f"cannot reach the bootstrap server(s) {self.opts.bootstrap}: {e}") from None
            for tp, (code, off) in parse_list_offsets(resp).items():
                if code:
                    raise error_for(code, f"ListOffsets for {tp.topic}-{tp.partition}")
                found[tp] = off
        fill = [tp for tp, off in found.items() if off < 0 and timestamps[tp] >= 0]
        if fill:
            found.update(self.list_offsets({tp: LATEST for tp in fill}))
        return found

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets({tp: LATEST for tp in tps})

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self.list_offsets({tp: EARLIEST for tp in tps})

    def resolve(self, tps: list[TopicPartition], spec: OffsetSpec, timestamp: int | None,
                by_timestamp: dict[str, dict[int, int]] | None, name: str) -> Offsets:
        """Concrete offsets for ``tps`` from a spec, with Spark's precedence: timestamp, per-partition
        timestamps, then the offsets spec."""
        if timestamp is not None:
            return self.list_offsets({tp: timestamp for tp in tps})
        if by_timestamp is not None:
            wanted = self._per_partition(tps, by_timestamp, name + "ByTimestamp")
            return self.list_offsets(wanted)
        if isinstance(spec, str):
            return self.list_offsets({tp: EARLIEST if spec == "earliest" else LATEST for tp in tps})
        wanted = self._per_partition(tps, spec, name)
        symbolic = {tp: v for tp, v in wanted.items() if v < 0}
        out = {tp: v for tp, v in wanted.items() if v >= 0}
        out.update(self.list_offsets(symbolic))
        return out

    def _per_partition(self, tps: list[TopicPartition], spec: dict[str, dict[int, int]], name: str
                       ) -> dict[TopicPartition, int]:
        have = set(tps)
        wanted = {TopicPartition(t, p): v for t, ps in spec.items() for p, v in ps.items()}
        unknown = sorted(set(wanted) - have)
        if unknown:
            raise OptionsError(f"option {name} names partitions outside the subscription: "
                               + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))
        missing = sorted(have - set(wanted))
        if missing:
            raise OptionsError(f"option {name} gives no offset for "
                               + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
        return wanted


# ---------------------------------------------------------------------------------------------- ranges
def plan_ranges(start: Offsets, end: Offsets, min_partitions: int | None) -> list[OffsetRange]:
    """Non-empty ranges ``[start, end)`` per partition, cut into more pieces for ``minPartitions``."""
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end)
              if tp in start and end[tp] > start[tp]]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        pos = r.start
        for i in range(parts):
            n = step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, pos, pos + n))
            pos += n
    return out


def limit_rows(start: Offsets, available: Offsets, max_rows: int) -> Offsets:
    """End offsets taking at most ``max_rows`` in total, shared in proportion to what each partition has."""
    sizes = {tp: max(0, available[tp] - start.get(tp, available[tp])) for tp in available}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(available)
    take = {tp: n * max_rows // total for tp, n in sizes.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(sizes, key=lambda t: (-(sizes[t] - take[t]), t)):
        if left <= 0:
            break
        if take[tp] < sizes[tp]:
            take[tp] += 1
            left -= 1
    return {tp: start.get(tp, available[tp]) + take[tp] for tp in available}


def check_reachable(bootstrap: str, timeout_ms: int = 5000, security: SecurityConfig | None = None) -> None:
    """Raise PlanningError naming the bootstrap servers when none of them answers (the sink's check), or
    when they refuse our login."""
    cluster = Cluster(bootstrap, client_id="groupcoord-spark-check", connect_timeout_ms=timeout_ms,
                      request_timeout_ms=timeout_ms, security=security)
    try:
        cluster.refresh_metadata([])
    except KafkaConnectionError as e:
        raise PlanningError(f"cannot reach the bootstrap server(s) {bootstrap}: {e}") from None
    except AuthenticationError as e:
        raise PlanningError(f"the bootstrap server(s) {bootstrap} refused us: {e}") from None
    except KafkaError:
        pass
    finally:
        cluster.close()
