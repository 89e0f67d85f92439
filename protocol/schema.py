"""Schemas as data: the declarative form of Kafka messages.

Rules:
- A message is declared once, as a tree of `Field`s, with Kafka's field names in snake_case
  (``GroupId`` -> ``group_id``) and Kafka's version ranges written as strings ("0+", "3-5", "none").
- A field's ``type`` is one of the primitive names below, ``"[]<primitive>"`` for an array of
  primitives, ``"[]"`` for an array of structs (its ``fields`` give the element), or ``"struct"`` for a
  nested struct (its ``fields`` give the members).
- ``nullable`` is Kafka's nullableVersions; ``tag``/``tagged`` are Kafka's tag and taggedVersions. A tagged
  field is written in the tagged-field section of its struct and only in flexible versions. Tags from
  ``OURS_FROM_TAG`` (1000) on are groupcoord's own extensions, which other clients skip (KIP-482).
- ``default`` is what an encoder writes when the value is missing (None for a non-nullable field);
  without one, numbers default to 0, strings to "", bytes to b"", arrays to [], bool to False.
- ``ApiSchema`` gives the versions we support (``valid``) and the first flexible version; everything here
  is plain data: building codecs is `protocol.codec`'s job, and nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

PRIMITIVES = frozenset(
    {
        "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
        "string", "bytes", "uuid", "records",
    }
)

# Tagged fields numbered from here are groupcoord's own extensions (KIP-482: a client skips tags it does not
# know), never Kafka's: schema-agreement and cross-encoding tests leave them out.
OURS_FROM_TAG = 1000


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``hi`` is None for open ranges ("3+"); empty when lo > hi."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(spec: str | None) -> Versions:
        if spec is None or spec == "none" or spec == "":
            return Versions(1, 0)
        spec = spec.strip()
        if spec.endswith("+"):
            return Versions(int(spec[:-1]), None)
        if "-" in spec:
            lo, hi = spec.split("-", 1)
            return Versions(int(lo), int(hi))
        v = int(spec)
        return Versions(v, v)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def is_empty(self) -> bool:
        return self.hi is not None and self.lo > self.hi


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    versions: str = "0+"
    nullable: str | None = None
    tag: int | None = None
    tagged: str | None = None
    default: Any = None
    fields: tuple[Field, ...] = ()
    about: str = ""

    def __post_init__(self) -> None:
        base = self.type.removeprefix("[]")
        if base not in PRIMITIVES and base not in ("", "struct"):
            raise ValueError(f"field {self.name}: unknown type {self.type!r}")
        if self.is_struct_like and not self.fields:
            raise ValueError(f"field {self.name}: struct types need fields")
        if (self.tag is None) != (self.tagged is None):
            raise ValueError(f"field {self.name}: tag and tagged go together")

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def is_struct_like(self) -> bool:
        return self.type in ("[]", "struct")

    @property
    def element_type(self) -> str:
        """For arrays: the element's primitive name, or "struct"."""
        return self.type[2:] or "struct"

    def present_in(self, version: int) -> bool:
        return version in Versions.parse(self.versions)

    def nullable_in(self, version: int) -> bool:
        return version in Versions.parse(self.nullable)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in Versions.parse(self.tagged)


def f(name: str, type: str, versions: str = "0+", **kw: Any) -> Field:
    """A primitive (or primitive-array) field."""
    return Field(name, type, versions, **kw)


def arr(name: str, versions: str = "0+", *fields: Field, **kw: Any) -> Field:
    """An array of structs whose element has ``fields``."""
    return Field(name, "[]", versions, fields=tuple(fields), **kw)


def struct(name: str, versions: str = "0+", *fields: Field, **kw: Any) -> Field:
    """A nested (non-array) struct."""
    return Field(name, "struct", versions, fields=tuple(fields), **kw)


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """One API: its key, Kafka's name (``JoinGroup``), the versions we support, request and response."""

    key: int
    name: str
    valid: str
    flexible: str
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    notes: str = ""
    _valid: Versions = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_valid", Versions.parse(self.valid))

    @property
    def min_version(self) -> int:
        return self._valid.lo

    @property
    def max_version(self) -> int:
        assert self._valid.hi is not None, "an API's valid range must be closed"
        return self._valid.hi

    def supports(self, version: int) -> bool:
        return version in self._valid

    def is_flexible(self, version: int) -> bool:
        return version in Versions.parse(self.flexible)
