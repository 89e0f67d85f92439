"""Response dicts shaped per API version (Kafka JSON schema field names in snake_case).

Rules: only fields that exist in some version are set; the encoder ignores fields a version lacks and
defaults the ones left out (throttle_time_ms ...). Nullable-by-version fields get "" below the version
that makes them nullable (JoinGroup protocol_name is nullable from v7, SyncGroup's from v5).
"""

from __future__ import annotations

from .errors import Err


def join_response(version: int, error: int, member_id: str = "", generation: int = -1,
                  protocol_type: str | None = None, protocol_name: str | None = None,
                  leader: str = "", members: list[dict] | None = None,
                  skip_assignment: bool = False) -> dict:
    return {
        "error_code": int(error),
        "generation_id": generation,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name if protocol_name is not None or version >= 7 else "",
        "leader": leader or "",
        "skip_assignment": skip_assignment,
        "member_id": member_id,
        "members": members if members is not None else [],
    }


def sync_response(error: int, assignment: bytes = b"", protocol_type: str | None = None,
                  protocol_name: str | None = None) -> dict:
    return {"error_code": int(error), "protocol_type": protocol_type, "protocol_name": protocol_name,
            "assignment": assignment}


def error_response(error: int) -> dict:
    """Heartbeat, and any API whose whole answer is one error code."""
    return {"error_code": int(error)}


def leave_response(version: int, error: int, members: list[dict]) -> dict:
    if version >= 3:
        return {"error_code": int(error), "members": members}
    if error == Err.NONE:
        error = next((m["error_code"] for m in members if m["error_code"] != Err.NONE), Err.NONE)
    return {"error_code": int(error)}


def offset_commit_response(topics: list[tuple[str, list[tuple[int, int]]]]) -> dict:
    return {"topics": [{"name": name, "partitions": [{"partition_index": p, "error_code": int(e)}
                                                     for p, e in parts]}
                       for name, parts in topics]}
