"""The field language of the message schemas (see ``schema``): a field, its version ranges, the
default marker, and the names the codec needs. Kept apart from ``schema`` so that the codec
(which compiles fields) and the schema (which owns the compiled codecs) do not import each
other."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final


class _NoDefault:
    """Marker: the field uses its type's default (0, "", empty, null for records...)."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault()

PRIMITIVE_TYPES: Final = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake_case(name: str) -> str:
    """Kafka's CamelCase field name as our dict key: ``ThrottleTimeMs`` → ``throttle_time_ms``."""
    return _CAMEL.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; ``lo > hi`` is the empty range ("none")."""

    lo: int
    hi: int

    @staticmethod
    def parse(text: str) -> VersionRange:
        text = text.strip()
        if text == "none":
            return VersionRange(1, 0)
        if text.endswith("+"):
            return VersionRange(int(text[:-1]), 0x7FFF)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return VersionRange(int(lo), int(hi))
        return VersionRange(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    def versions(self) -> range:
        return range(self.lo, self.hi + 1)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct, with Kafka's attributes (see the module docstring).

    Invariants (checked by :meth:`MessageSchema.validate`): a tagged field has both ``tag`` and
    ``tagged_versions``, and ``tagged_versions`` lies within the message's flexible versions;
    a struct or struct-array type has ``fields`` and a primitive type has none.
    """

    name: str
    type: str
    versions: str
    nullable_versions: str = "none"
    tag: int | None = None
    tagged_versions: str = "none"
    default: Any = NO_DEFAULT
    fields: tuple[Field, ...] = ()
    flexible_versions: str | None = None

    @property
    def key(self) -> str:
        """The dict key of this field in decoded values."""
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The element type of an array, or the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True for a struct or an array of structs."""
        return self.element_type not in PRIMITIVE_TYPES

    def present_in(self, version: int) -> bool:
        return version in VersionRange.parse(self.versions)

    def nullable_in(self, version: int) -> bool:
        return version in VersionRange.parse(self.nullable_versions)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in VersionRange.parse(self.tagged_versions)

    def flexible_in(self, version: int, message_flexible: bool) -> bool:
        """Whether this field's own encoding is compact at ``version``."""
        if self.flexible_versions is None:
            return message_flexible
        return version in VersionRange.parse(self.flexible_versions)
