"""Builds construct codecs from schema declarations, for one (message, version) at a time.

Rules:
- ``build_struct(fields, version, flexible)`` resolves the declaration for that version (fields present,
  nullability, tags, compact encodings when flexible) into a ``KStruct``: a construct ``Construct`` that
  parses to a plain ``dict`` (arrays are ``list``s) and builds from any mapping.
- ``KStruct`` is compile-safe: it implements ``_emitparse``/``_emitbuild``, so ``.compile()`` turns the
  whole message into straight-line Python (runs of fixed-width fields read with one ``struct`` call), and
  it also implements ``_parse``/``_build`` (a generic interpreter) which tests compare against the compiled
  form. No Adapter, lambda or context expression is used, so nothing falls back to interpretation.
- Decoding never trusts a declared length: counts are checked against the bytes left before any list is
  built (``protocol.primitives.check_count``), string/bytes lengths against the bytes actually read.
- The compiled parser inlines the common cases and calls ``protocol.primitives`` only for the rest: a
  length whose varint fits one byte, an empty tagged-field section (one 0 byte), a count of 0 or null.
- Missing values are encoded as the field's default; ``None`` in a non-nullable field also means default.
- A nullable (untagged) struct is Kafka's: int8 -1 for null, else int8 1 and then the struct.
- A ``records`` field is written by ``primitives.write_records``: bytes as any bytes field; any other value
  with a length (a file range) as its length prefix and a splice point, which only a parts writer
  (``codec.encode_response_parts``) accepts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from construct import Construct

from protocol import primitives as P
from protocol.errors import ProtocolError
from protocol.schema import Field

_MISSING = object()

_ZERO = {
    "bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0,
    "float64": 0.0, "string": "", "bytes": b"", "uuid": P.ZERO_UUID, "records": None,
}


@dataclass(slots=True)
class Resolved:
    """A field as it is encoded in one version."""

    name: str
    kind: str            # fixed | string | bytes | uuid | array | struct
    type: str            # primitive name, or element primitive name for arrays, "struct" for structs
    nullable: bool
    default: Any
    tag: int | None
    sub: KStruct | None  # element/member struct for struct arrays and structs

    @property
    def fixed(self) -> tuple[str, int] | None:
        return P.FIXED.get(self.type) if self.kind == "fixed" else None


def _default(field: Field, nullable: bool) -> Any:
    if field.default is not None:
        return field.default
    if field.is_array:
        return None if nullable else []
    if nullable:
        return None
    return _ZERO.get(field.type)


def build_struct(fields: tuple[Field, ...], version: int, flexible: bool, label: str = "") -> KStruct:
    resolved: list[Resolved] = []
    for fd in fields:
        if not fd.present_in(version):
            continue
        nullable = fd.nullable_in(version) or fd.type == "records"
        tag = fd.tag if (flexible and fd.tagged_in(version)) else None
        if fd.tagged_in(version) and not flexible:
            continue  # tagged fields exist only in flexible versions
        sub = None
        if fd.is_struct_like:
            sub = build_struct(fd.fields, version, flexible, f"{label}.{fd.name}")
        if fd.type == "struct" and nullable and tag is not None:
            raise ValueError(f"{label}.{fd.name}: a tagged nullable struct is not supported")
        if fd.is_array:
            kind, typ = "array", fd.element_type
        elif fd.type == "struct":
            kind, typ = "struct", "struct"
        elif fd.type in P.FIXED:
            kind, typ = "fixed", fd.type
        elif fd.type in ("bytes", "records"):
            kind, typ = "bytes", fd.type
        else:
            kind, typ = fd.type, fd.type
        resolved.append(Resolved(fd.name, kind, typ, nullable, _default(fd, nullable), tag, sub))
    return KStruct(tuple(resolved), flexible, label)


def _min_size(r: Resolved, compact: bool) -> int:
    if r.tag is not None:
        return 0
    if r.kind == "fixed":
        return P.FIXED[r.type][1]
    if r.kind == "uuid":
        return 16
    if r.kind == "struct":
        assert r.sub is not None
        return 1 if r.nullable else r.sub.min_size
    if r.kind == "bytes" or r.kind == "array":
        return 1 if compact else 4
    return 1 if compact else 2  # string


def _elem_min_size(r: Resolved, compact: bool) -> int:
    if r.type == "struct":
        assert r.sub is not None
        return r.sub.min_size
    if r.type in P.FIXED:
        return P.FIXED[r.type][1]
    if r.type == "uuid":
        return 16
    return 1 if compact else (2 if r.type == "string" else 4)


# ====================================================================== interpreter
def _read_value(io: BytesIO, r: Resolved, c: bool) -> Any:
    k = r.kind
    if k == "fixed":
        fmt, size = P.FIXED[r.type]
        return struct.unpack(">" + fmt, P.read_exact(io, size))[0]
    if k == "string":
        return P.read_string(io, c, r.nullable)
    if k == "bytes":
        return P.read_bytes(io, c, r.nullable)
    if k == "uuid":
        return P.read_uuid(io)
    if k == "struct":
        assert r.sub is not None
        if r.nullable and struct.unpack(">b", P.read_exact(io, 1))[0] < 0:
            return None
        return r.sub.parse_into(io)
    n = P.read_count(io, c, r.nullable, _elem_min_size(r, c))
    if n < 0:
        return None
    elem = Resolved(r.name, _kind_of(r.type), r.type, False, None, None, r.sub)
    return [_read_value(io, elem, c) for _ in range(n)]


def _kind_of(typ: str) -> str:
    if typ in P.FIXED:
        return "fixed"
    if typ in ("bytes", "records"):
        return "bytes"
    return typ  # string | uuid | struct


def _value_or_default(obj: Any, r: Resolved) -> Any:
    v = obj.get(r.name, _MISSING) if hasattr(obj, "get") else getattr(obj, r.name, _MISSING)
    if v is _MISSING or (v is None and not r.nullable):
        return r.default
    return v


def _write_value(io: BytesIO, r: Resolved, v: Any, c: bool) -> None:
    k = r.kind
    if k == "fixed":
        io.write(struct.pack(">" + P.FIXED[r.type][0], v))
    elif k == "string":
        P.write_string(io, v, c)
    elif k == "bytes":
        (P.write_records if r.type == "records" else P.write_bytes)(io, v, c)
    elif k == "uuid":
        P.write_uuid(io, v)
    elif k == "struct":
        assert r.sub is not None
        if r.nullable:
            io.write(b"\xff" if v is None else b"\x01")
            if v is None:
                return
        r.sub.build_into(v if v is not None else {}, io)
    else:
        if v is None:
            if r.nullable:
                P.write_count(io, -1, c)
                return
            v = []
        P.write_count(io, len(v), c)
        elem = Resolved(r.name, _kind_of(r.type), r.type, False, _ZERO.get(r.type), None, r.sub)
        for e in v:
            _write_value(io, elem, e if e is not None else elem.default, c)


def parse_tagged(io: BytesIO, table: dict[int, tuple[str, Any]], result: dict, this: Any) -> None:
    """Read a tagged-field section; known tags are parsed by table[tag][1](io, this), others skipped."""
    count = P.read_uvarint(io)
    for _ in range(count):
        tag = P.read_uvarint(io)
        size = P.read_uvarint(io)
        if size > P.remaining(io):
            raise ProtocolError(f"tagged field {tag} longer than the bytes left")
        entry = table.get(tag)
        if entry is None:
            io.seek(size, 1)
            continue
        start = io.tell()
        result[entry[0]] = entry[1](io, this)
        if io.tell() - start != size:
            raise ProtocolError(f"tagged field {tag} declared {size} bytes, used {io.tell() - start}")


def write_tagged(io: BytesIO, entries: list[tuple[int, bytes]]) -> None:
    io.write(P.encode_uvarint(len(entries)))
    for tag, payload in sorted(entries):
        io.write(P.encode_uvarint(tag))
        io.write(P.encode_uvarint(len(payload)))
        io.write(payload)


# ====================================================================== the construct
class KStruct(Construct):
    """A Kafka struct for one version: parses to a dict, builds from a mapping; compile-safe."""

    def __init__(self, fields: tuple[Resolved, ...], flexible: bool, label: str = "") -> None:
        super().__init__()
        self.kfields = fields
        self.flexible = flexible
        self.label = label
        body = [r for r in fields if r.tag is None]
        self.min_size = sum(_min_size(r, flexible) for r in body) + (1 if flexible else 0)

    # ---- interpreted form (also the reference the compiled form is tested against)
    def parse_into(self, io: BytesIO) -> dict:
        c = self.flexible
        result: dict[str, Any] = {}
        for r in self.kfields:
            if r.tag is None:
                result[r.name] = _read_value(io, r, c)
            else:
                result[r.name] = r.default
        if c:
            table = {r.tag: (r.name, (lambda io, this, r=r: _read_value(io, r, c)))
                     for r in self.kfields if r.tag is not None}
            parse_tagged(io, table, result, None)
        return result

    def build_into(self, obj: Any, io: BytesIO) -> None:
        c = self.flexible
        for r in self.kfields:
            if r.tag is None:
                _write_value(io, r, _value_or_default(obj, r), c)
        if c:
            entries = []
            for r in self.kfields:
                if r.tag is None:
                    continue
                v = _value_or_default(obj, r)
                if v is None or v == r.default:
                    continue
                tmp = BytesIO()
                _write_value(tmp, r, v, c)
                entries.append((r.tag, tmp.getvalue()))
            write_tagged(io, entries)

    def _parse(self, stream: Any, context: Any, path: Any) -> dict:
        return self.parse_into(stream)

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        self.build_into(obj, stream)
        return obj

    def _sizeof(self, context: Any, path: Any) -> int:
        raise NotImplementedError("Kafka structs have no fixed size")

    # ---- compiled form
    def _emit_prelude(self, code: Any) -> None:
        code.append(
            """
            from protocol.primitives import read_string as _rstr, read_bytes as _rbytes, read_uuid as _ruuid
            from protocol.primitives import write_string as _wstr, write_bytes as _wbytes
            from protocol.primitives import write_records as _wrec
            from protocol.primitives import write_count as _wcount, write_uuid as _wuuid
            from protocol.compiler import parse_tagged as _ptags, write_tagged as _wtags, _MISSING
            from protocol.primitives import read_uvarint_after as _ruvx, skip_tagged_after as _skipx
            from protocol.primitives import truncated as _trunc, bad_length as _badlen, check_count as _chk
            from protocol.compiler import _ZERO
            _h = struct.Struct('>h').unpack
            _i = struct.Struct('>i').unpack
            from io import BytesIO as _BytesIO
            from uuid import UUID as _UUID
            _unpack = struct.unpack
            _pack = struct.pack
            """
        )

    def _emitparse(self, code: Any) -> str:
        self._emit_prelude(code)
        fid = code.allocateId()
        fname = f"parse_k{fid}"
        c = self.flexible
        lines = [f"def {fname}(io, this):"]
        body = [r for r in self.kfields if r.tag is None]
        i = 0
        run = 0
        while i < len(body):
            j = i
            while j < len(body) and body[j].fixed:
                j += 1
            if j - i >= 1:
                fmt = ">" + "".join(body[k].fixed[0] for k in range(i, j))  # type: ignore[index]
                size = struct.calcsize(fmt)
                sname = f"_S_k{fid}_{run}"
                run += 1
                code.append(f"{sname} = struct.Struct({fmt!r})")
                names = ", ".join(f"v{k}" for k in range(i, j))
                trail = "," if j - i == 1 else ""
                lines.append(f"    {names}{trail} = {sname}.unpack(io.read({size}))")
                i = j
                continue
            lines.extend(self._emit_read(code, body[i], f"v{i}", c, "    "))
            i += 1
        items = ", ".join(f"{r.name!r}: v{k}" for k, r in enumerate(body))
        tagged = [r for r in self.kfields if r.tag is not None]
        if tagged:
            defaults = ", ".join(f"{r.name!r}: {self._const(code, r.default)}" for r in tagged)
            lines.append(f"    result = {{{items}, {defaults}}}" if items else f"    result = {{{defaults}}}")
            table_name = f"_T_k{fid}"
            entries = []
            for r in tagged:
                tf = f"parse_k{fid}_t{r.tag}"
                tl = [f"def {tf}(io, this):"] + self._emit_read(code, r, "v", c, "    ") + ["    return v"]
                code.append("\n".join(tl))
                entries.append(f"{r.tag}: ({r.name!r}, {tf})")
            code.append(f"{table_name} = {{{', '.join(entries)}}}")
            lines.append("    if (t := io.read(1)) != b'\\x00':")
            lines.append("        io.seek(-len(t), 1)")
            lines.append(f"        _ptags(io, {table_name}, result, this)")
            lines.append("    return result")
        else:
            if c:
                lines.append("    if (t := io.read(1)) != b'\\x00': _skipx(io, t)")
            lines.append(f"    return {{{items}}}")
        code.append("\n".join(lines))
        return f"{fname}(io, this)"

    def _const(self, code: Any, value: Any) -> str:
        """A default as a Python literal in the generated module."""
        if isinstance(value, P.uuid.UUID):
            return f"_UUID({str(value)!r})"
        return repr(value)

    def _emit_read(self, code: Any, r: Resolved, var: str, c: bool, ind: str) -> list[str]:
        k = r.kind
        if k == "fixed":
            fmt, size = P.FIXED[r.type]
            return [f"{ind}{var}, = _unpack('>{fmt}', io.read({size}))"]
        if k in ("string", "bytes"):
            return _emit_read_sized(k, var, c, r.nullable, ind)
        if k == "uuid":
            return [f"{ind}{var} = _ruuid(io)"]
        if k == "struct":
            assert r.sub is not None
            if r.nullable:  # Kafka's nullable struct: int8 -1 for null, else 1 and the struct
                return [f"{ind}{var}, = _unpack('>b', io.read(1))",
                        f"{ind}{var} = None if {var} < 0 else {r.sub._compileparse(code)}"]
            return [f"{ind}{var} = {r.sub._compileparse(code)}"]
        # arrays
        out = [f"{ind}{_emit_length(c, 'n', 4)}", f"{ind}if {'n > 0 or n < -1' if r.nullable else 'n'}: n = _chk(io, n, {r.nullable}, {_elem_min_size(r, c)})"]
        t = r.type
        if t in P.FIXED:
            fmt, size = P.FIXED[t]
            expr = f"list(_unpack('>%d{fmt}' % n, io.read(n * {size})))"
        elif t == "string":
            expr = f"[_rstr(io, {c}, False) for _ in range(n)]"
        elif t in ("bytes", "records"):
            expr = f"[_rbytes(io, {c}, False) for _ in range(n)]"
        elif t == "uuid":
            expr = "[_ruuid(io) for _ in range(n)]"
        else:
            assert r.sub is not None
            expr = f"[{r.sub._compileparse(code)} for _ in range(n)]"
        if r.nullable:
            out.append(f"{ind}{var} = None if n < 0 else {expr}")
        else:
            out.append(f"{ind}{var} = {expr}")
        return out

    def _emitbuild(self, code: Any) -> str:
        self._emit_prelude(code)
        fid = code.allocateId()
        fname = f"build_k{fid}"
        c = self.flexible
        lines = [f"def {fname}(obj, io, this):", "    g = obj.get", "    w = io.write"]
        body = [r for r in self.kfields if r.tag is None]
        i = 0
        run = 0
        while i < len(body):
            j = i
            while j < len(body) and body[j].fixed:
                j += 1
            if j > i:
                fmt = ">" + "".join(body[k].fixed[0] for k in range(i, j))  # type: ignore[index]
                sname = f"_SB_k{fid}_{run}"
                run += 1
                code.append(f"{sname} = struct.Struct({fmt!r})")
                args = []
                for k in range(i, j):
                    d = repr(body[k].default)
                    args.append(f"(t{k} if (t{k} := g({body[k].name!r})) is not None else {d})")
                lines.append(f"    w({sname}.pack({', '.join(args)}))")
                i = j
                continue
            lines.extend(self._emit_write(code, body[i], f"t{i}", c))
            i += 1
        tagged = [r for r in self.kfields if r.tag is not None]
        if c and tagged:
            lines.append("    entries = []")
            for r in tagged:
                d = self._const(code, r.default)
                lines.append(f"    v = g({r.name!r})")
                lines.append(f"    if v is not None and v != {d}:")
                lines.append("        outer = io; io = _BytesIO()")
                lines.extend(self._emit_write_value(code, r, "v", c, "        "))
                lines.append(f"        entries.append(({r.tag}, io.getvalue())); io = outer")
            lines.append("    _wtags(io, entries)")
        elif c:
            lines.append("    w(b'\\x00')")
        lines.append("    return obj")
        code.append("\n".join(lines))
        return f"{fname}(obj, io, this)"

    def _emit_write(self, code: Any, r: Resolved, var: str, c: bool) -> list[str]:
        d = self._const(code, r.default)
        out = [f"    {var} = g({r.name!r}, _MISSING)"]
        if r.nullable:
            out.append(f"    if {var} is _MISSING: {var} = {d}")
        else:
            out.append(f"    if {var} is _MISSING or {var} is None: {var} = {d}")
        return out + self._emit_write_value(code, r, var, c, "    ")

    def _emit_write_value(self, code: Any, r: Resolved, var: str, c: bool, ind: str) -> list[str]:
        k = r.kind
        if k == "fixed":
            return [f"{ind}io.write(_pack('>{P.FIXED[r.type][0]}', {var}))"]
        if k == "string":
            return [f"{ind}_wstr(io, {var}, {c})"]
        if k == "bytes":
            return [f"{ind}{'_wrec' if r.type == 'records' else '_wbytes'}(io, {var}, {c})"]
        if k == "uuid":
            return [f"{ind}_wuuid(io, {var})"]
        if k == "struct":
            assert r.sub is not None
            if r.nullable:
                return [f"{ind}if {var} is None:", f"{ind}    io.write(b'\\xff')", f"{ind}else:",
                        f"{ind}    io.write(b'\\x01')",
                        f"{ind}    obj_, obj = obj, {var}",
                        f"{ind}    {r.sub._compilebuild(code)}", f"{ind}    obj = obj_"]
            return [f"{ind}obj_, obj = obj, ({var} if {var} is not None else {{}})",
                    f"{ind}{r.sub._compilebuild(code)}", f"{ind}obj = obj_"]
        out = [f"{ind}if {var} is None:", f"{ind}    _wcount(io, -1, {c})", f"{ind}else:",
               f"{ind}    _wcount(io, len({var}), {c})"]
        t = r.type
        if t in P.FIXED:
            fmt = P.FIXED[t][0]
            out.append(f"{ind}    io.write(_pack('>%d{fmt}' % len({var}), *{var}))")
        elif t == "string":
            out.append(f"{ind}    for e in {var}: _wstr(io, e if e is not None else '', {c})")
        elif t in ("bytes", "records"):
            out.append(f"{ind}    for e in {var}: _wbytes(io, e if e is not None else b'', {c})")
        elif t == "uuid":
            out.append(f"{ind}    for e in {var}: _wuuid(io, e)")
        else:
            assert r.sub is not None
            sub = r.sub._compilebuild(code)
            out.append(f"{ind}    obj_ = obj")
            out.append(f"{ind}    for obj in {var}: {sub}")
            out.append(f"{ind}    obj = obj_")
        return out


# ====================================================================== compiled fast paths
def _emit_length(compact: bool, var: str, classic_width: int) -> str:
    """One line reading a length/count into ``var``: -1 means null. Compact lengths are varints holding
    length + 1, read inline when they fit one byte; classic ones are int16 (strings) or int32."""
    if compact:
        return f"{var} = (t[0] if b'' < (t := io.read(1)) < b'\\x80' else _ruvx(io, t)) - 1"
    unpack = "_h" if classic_width == 2 else "_i"
    return f"{var}, = {unpack}(io.read({classic_width}))"


def _emit_read_sized(kind: str, var: str, compact: bool, nullable: bool, ind: str) -> list[str]:
    """Inline read of a string or bytes field: length, bounds check, then the bytes (decoded for strings)."""
    out = [
        ind + _emit_length(compact, "n", 2 if kind == "string" else 4),
        f"{ind}if n >= 0:",
        f"{ind}    {var} = io.read(n)",
        f"{ind}    if len({var}) != n: _trunc(n, len({var}), {kind!r})",
    ]
    if kind == "string":
        out.append(f"{ind}    {var} = {var}.decode('utf-8')")
    if nullable:
        out.append(f"{ind}elif n == -1: {var} = None")
    out.append(f"{ind}else: _badlen(n, {kind!r})")
    return out
