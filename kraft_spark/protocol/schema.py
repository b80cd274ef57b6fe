"""A small schema language, modelled on Kafka's message JSON files.

A message is a :class:`MessageSchema` (valid and flexible version ranges plus a tuple of
:class:`Field`). A field has Kafka's attributes: a CamelCase ``name``, a ``type`` string
(``int8 int16 int32 int64 uint16 uint32 float64 bool string bytes records uuid``, ``[]T`` for an
array of a primitive ``T``, or any other name for a struct — then ``fields`` holds its members;
``[]Name`` with ``fields`` is an array of structs), the ``versions`` it exists in, the
``nullable_versions`` in which it may be null, a ``tag`` and ``tagged_versions`` when it travels in
the tagged-field section, a ``default``, and a per-field ``flexible_versions`` override (Kafka
uses ``"none"`` for the request header's ClientId, which stays a classic string).

Version ranges are Kafka's strings: ``"0+"``, ``"3"``, ``"0-12"``, ``"none"``.

Python values: a struct is a ``dict`` whose keys are the snake_case field names
(``LastFetchedEpoch`` → ``last_fetched_epoch``); arrays are ``list``; ``string`` is ``str``;
``bytes`` and ``records`` are ``bytes``; ``uuid`` is :class:`uuid.UUID`; null is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.protocol.codec import BodyCodec
from kraft_spark.protocol.exceptions import SchemaError
from kraft_spark.protocol.fields import (
    Field,
    VersionRange,
)


@dataclass(frozen=True)
class MessageSchema:
    """A request, response or header schema: the unit the generic codec compiles."""

    name: str
    valid_versions: str
    flexible_versions: str
    fields: tuple[Field, ...]
    api_key: int | None = None
    _codecs: dict[int, BodyCodec] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def valid(self) -> VersionRange:
        return VersionRange.parse(self.valid_versions)

    def is_flexible(self, version: int) -> bool:
        return version in VersionRange.parse(self.flexible_versions)

    def codec(self, version: int) -> BodyCodec:
        """The compiled codec for ``version`` (compiled once, then cached)."""
        codec = self._codecs.get(version)
        if codec is None:
            if version not in self.valid:
                raise SchemaError(f"{self.name} has no version {version}")
            if not self._codecs:
                self.validate()  # once per schema, before its first compilation
            codec = BodyCodec(self.name, self.fields, version, self.is_flexible(version))
            self._codecs[version] = codec
        return codec

    def validate(self) -> None:
        """Check the invariants of every field; raises :class:`SchemaError`."""
        flexible = VersionRange.parse(self.flexible_versions)
        valid = self.valid
        _validate_fields(self.name, self.fields, valid, flexible)


def _validate_fields(
    where: str, fields: tuple[Field, ...], valid: VersionRange, flexible: VersionRange
) -> None:
    seen: set[str] = set()
    tags: set[int] = set()
    for f in fields:
        path = f"{where}.{f.name}"
        if f.key in seen:
            raise SchemaError(f"duplicate field {path}")
        seen.add(f.key)
        versions = VersionRange.parse(f.versions)
        if not any(v in versions for v in valid.versions()):
            raise SchemaError(f"{path} exists in no valid version")
        if (f.tag is None) != (f.tagged_versions == "none"):
            raise SchemaError(f"{path}: tag and tagged_versions go together")
        if f.tag is not None:
            if f.tag in tags:
                raise SchemaError(f"{path}: duplicate tag {f.tag}")
            tags.add(f.tag)
            tagged = VersionRange.parse(f.tagged_versions)
            if any(v not in flexible for v in tagged.versions() if v in valid):
                raise SchemaError(f"{path}: tagged outside the flexible versions")
        if f.is_struct != bool(f.fields):
            raise SchemaError(f"{path}: struct types need fields, primitives none")
        if f.is_struct and not f.is_array and f.nullable_versions != "none":
            raise SchemaError(f"{path}: nullable structs are not supported")
        if f.element_type == "records" and f.is_array:
            raise SchemaError(f"{path}: arrays of records are not supported")
        if f.fields:
            _validate_fields(path, f.fields, valid, flexible)
