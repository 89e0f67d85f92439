"""Hypothesis strategies that generate valid message bodies from a resolved KStruct."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from protocol.compiler import KStruct, Resolved

_INT = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _prim(t: str) -> st.SearchStrategy:
    if t in _INT:
        lo, hi = _INT[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.builds(uuid.UUID, bytes=st.binary(min_size=16, max_size=16))
    raise AssertionError(t)


def _value(r: Resolved, depth: int) -> st.SearchStrategy:
    if r.kind == "struct":
        assert r.sub is not None
        inner = body(r.sub, depth + 1)
    elif r.kind == "array":
        elem = body(r.sub, depth + 1) if r.type == "struct" else _prim(r.type)  # type: ignore[arg-type]
        inner = st.lists(elem, max_size=3 if depth < 2 else 1)
    else:
        inner = _prim(r.type)
    if r.nullable:
        return st.one_of(st.none(), inner)
    return inner


def body(ks: KStruct, depth: int = 0) -> st.SearchStrategy:
    return st.fixed_dictionaries({r.name: _value(r, depth) for r in ks.kfields})
