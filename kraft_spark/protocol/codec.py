"""The one generic encoder/decoder: compiles a (schema, version) into read/write closures.

Compilation happens once per (schema, version) (``MessageSchema.codec`` in ``schema``). The compiled
form is a flat list of steps per struct: runs of consecutive fixed-width, non-nullable fields
(int8..int64, uint16/32, float64, bool) collapse into a single precompiled ``struct.Struct`` so
the hot path does one ``unpack_from``/``pack`` per run; every other field is one closure call.

Wire rules implemented here:

* A field exists at a version iff the version is in its ``versions``; absent fields are neither
  read nor written and never appear in decoded dicts.
* Flexible versions use compact strings/bytes/arrays and end *every* struct with a tagged-field
  section. Known tags are decoded within their declared size (a size mismatch is a protocol
  error); unknown tags are skipped. Tags are written in ascending order, and a tagged field is
  written only when its value differs from its default (``None`` or a missing key counts as the
  default), exactly like Kafka; on decode an absent tagged field takes its default.
* Decoded structs are dicts holding every field of the version (snake_case keys). On encode a
  missing key takes the field's default, so callers may omit fields they do not care about.

Errors: decoding raises only :class:`ProtocolError`; encoding raises only :class:`EncodeError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kraft_spark.protocol import primitives as p
from kraft_spark.protocol.exceptions import EncodeError, ProtocolError
from kraft_spark.protocol.fields import NO_DEFAULT, Field
from kraft_spark.protocol.primitives import Reader

Struct = dict[str, Any]
ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[bytearray, Any], None]
ReadStep = Callable[[Reader, Struct], None]
WriteStep = Callable[[bytearray, Struct], None]
Factory = Callable[[], Any]

# name -> (struct format char or None, size, reader, writer, zero value)
_FIXED: dict[str, tuple[str | None, int, ReadFn, WriteFn, Any]] = {
    "int8": ("b", 1, Reader.int8, p.write_int8, 0),
    "int16": ("h", 2, Reader.int16, p.write_int16, 0),
    "int32": ("i", 4, Reader.int32, p.write_int32, 0),
    "int64": ("q", 8, Reader.int64, p.write_int64, 0),
    "uint16": ("H", 2, Reader.uint16, p.write_uint16, 0),
    "uint32": ("I", 4, Reader.uint32, p.write_uint32, 0),
    "float64": ("d", 8, Reader.float64, p.write_float64, 0.0),
    "bool": ("?", 1, Reader.boolean, p.write_bool, False),
    "uuid": (None, 16, Reader.uuid, p.write_uuid, p.NIL_UUID),
}

# (type, compact, nullable) -> (reader, writer)
_VARIABLE: dict[tuple[str, bool, bool], tuple[ReadFn, WriteFn]] = {
    ("string", False, False): (Reader.string, p.write_string),
    ("string", False, True): (Reader.nullable_string, p.write_nullable_string),
    ("string", True, False): (Reader.compact_string, p.write_compact_string),
    ("string", True, True): (Reader.compact_nullable_string, p.write_compact_nullable_string),
    ("bytes", False, False): (Reader.bytes_, p.write_bytes),
    ("bytes", False, True): (Reader.nullable_bytes, p.write_nullable_bytes),
    ("bytes", True, False): (Reader.compact_bytes, p.write_compact_bytes),
    ("bytes", True, True): (Reader.compact_nullable_bytes, p.write_compact_nullable_bytes),
}

_DECODE_FAULTS = (struct.error, IndexError, ValueError, OverflowError)
_ENCODE_FAULTS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


class _TypeCodec:
    """How one field's value is read and written at one version."""

    __slots__ = ("default", "fmt", "min_size", "read", "write")

    def __init__(
        self, read: ReadFn, write: WriteFn, min_size: int, fmt: str | None, default: Factory
    ) -> None:
        self.read = read
        self.write = write
        self.min_size = min_size
        self.fmt = fmt  # struct char when the value can join a fixed-width run
        self.default = default


def _const(value: Any) -> Factory:
    return lambda: value


def _compile_field(f: Field, version: int, flexible: bool) -> _TypeCodec:
    compact = f.flexible_in(version, flexible)
    nullable = f.nullable_in(version)
    if f.is_array:
        return _compile_array(f, version, flexible, compact, nullable)
    if f.is_struct:
        return _compile_struct(f.fields, version, flexible)
    base = "bytes" if f.type == "records" else f.type
    if base in _FIXED:
        fmt, size, read, write, zero = _FIXED[base]
        default = zero if f.default is NO_DEFAULT else f.default
        return _TypeCodec(read, write, size, fmt, _const(default))
    read, write = _VARIABLE[(base, compact, nullable)]
    if f.default is not NO_DEFAULT:
        default = f.default
    elif f.type == "records":
        default = None
    else:
        default = "" if base == "string" else b""
    return _TypeCodec(
        read, write, 1 if compact else (2 if base == "string" else 4), None, _const(default)
    )


def _compile_array(
    f: Field, version: int, flexible: bool, compact: bool, nullable: bool
) -> _TypeCodec:
    elem_type = f.element_type
    if f.is_struct:
        elem = _compile_struct(f.fields, version, flexible)
    else:
        elem = _compile_field(Field(f.name, elem_type, f.versions), version, flexible)
    elem_read, elem_write, elem_min, fmt = elem.read, elem.write, elem.min_size, elem.fmt
    read_len = p.Reader.array_length

    def read(r: Reader) -> list[Any] | None:
        n = read_len(r, compact, elem_min)
        if n < 0:
            if nullable:
                return None
            raise ProtocolError(f"null for non-nullable array {f.name}")
        if fmt is not None:
            start = r.advance(n * elem_min)
            return list(struct.unpack_from(f">{n}{fmt}", r.buf, start))
        return [elem_read(r) for _ in range(n)]

    def write(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise EncodeError(f"None for non-nullable array {f.name}")
            p.write_array_length(out, None, compact)
            return
        p.write_array_length(out, len(v), compact)
        if fmt is not None:
            out += struct.pack(f">{len(v)}{fmt}", *v)
        else:
            for e in v:
                elem_write(out, e)

    return _TypeCodec(read, write, 1 if compact else 4, None, list)


def _fixed_run_steps(run: list[tuple[str, str, Any]]) -> tuple[ReadStep, WriteStep]:
    """One read step and one write step for consecutive fixed-width fields."""
    s = struct.Struct(">" + "".join(fmt for _, fmt, _ in run))
    keys = tuple(key for key, _, _ in run)
    key_defaults = tuple((key, default) for key, _, default in run)
    size, unpack_from, pack = s.size, s.unpack_from, s.pack

    def read(r: Reader, d: Struct) -> None:
        d.update(zip(keys, unpack_from(r.buf, r.advance(size)), strict=True))

    def write(out: bytearray, d: Struct) -> None:
        out += pack(*[d.get(k, dv) for k, dv in key_defaults])

    return read, write


def _single_steps(key: str, codec: _TypeCodec, missing: Any) -> tuple[ReadStep, WriteStep]:
    read_value, write_value = codec.read, codec.write

    def read(r: Reader, d: Struct) -> None:
        d[key] = read_value(r)

    def write(out: bytearray, d: Struct) -> None:
        write_value(out, d.get(key, missing))

    return read, write


class _Tagged:
    """A field carried in the tagged-field section at this version."""

    __slots__ = ("codec", "default_value", "is_struct", "key", "nullable", "tag")

    def __init__(self, f: Field, codec: _TypeCodec, nullable: bool) -> None:
        assert f.tag is not None
        self.tag: int = f.tag
        self.key = f.key
        self.codec = codec
        self.nullable = nullable
        self.is_struct = f.is_struct and not f.is_array
        self.default_value = codec.default()

    def is_default(self, v: Any) -> bool:
        if v is None:
            return not self.nullable or self.default_value is None
        if self.is_struct and not v:
            return True
        return bool(v == self.default_value)


def _tag_steps(tagged: list[_Tagged]) -> tuple[ReadStep, WriteStep]:
    by_tag = {t.tag: (t.key, t.codec.read) for t in tagged}
    defaults = tuple((t.key, t.codec.default) for t in tagged)
    ordered = sorted(tagged, key=lambda t: t.tag)

    def read(r: Reader, d: Struct) -> None:
        count = r.uvarint()
        if count * 2 > r.end - r.pos:
            raise ProtocolError(f"{count} tagged fields exceed the bytes left")
        for _ in range(count):
            tag = r.uvarint()
            size = r.uvarint()
            start = r.advance(size)
            known = by_tag.get(tag)
            if known is not None:  # unknown tags were skipped by advance()
                sub = Reader(r.buf, start, start + size)
                d[known[0]] = known[1](sub)
                if sub.pos != sub.end:
                    raise ProtocolError(f"tagged field {tag} does not fill its {size} bytes")
        for key, factory in defaults:
            if key not in d:
                d[key] = factory()

    def write(out: bytearray, d: Struct) -> None:
        present: list[tuple[int, bytearray]] = []
        for t in ordered:
            v = d.get(t.key)
            if t.key not in d or t.is_default(v):
                continue
            data = bytearray()
            t.codec.write(data, v)
            present.append((t.tag, data))
        p.write_uvarint(out, len(present))
        for tag, data in present:
            p.write_uvarint(out, tag)
            p.write_uvarint(out, len(data))
            out += data

    return read, write


def _skip_tags_read(r: Reader, d: Struct) -> None:
    r.skip_tagged_fields()


def _empty_tags_write(out: bytearray, d: Struct) -> None:
    out.append(0)


def _compile_struct(fields: tuple[Field, ...], version: int, flexible: bool) -> _TypeCodec:
    read_steps: list[ReadStep] = []
    write_steps: list[WriteStep] = []
    defaults: list[tuple[str, Factory]] = []
    tagged: list[_Tagged] = []
    run: list[tuple[str, str, Any]] = []
    min_size = 1 if flexible else 0

    def flush_run() -> None:
        if run:
            r, w = _fixed_run_steps(run)
            read_steps.append(r)
            write_steps.append(w)
            run.clear()

    for f in fields:
        if not f.present_in(version):
            continue
        codec = _compile_field(f, version, flexible)
        defaults.append((f.key, codec.default))
        if f.tagged_in(version):
            tagged.append(_Tagged(f, codec, f.nullable_in(version)))
            continue
        min_size += codec.min_size
        if codec.fmt is not None:
            run.append((f.key, codec.fmt, codec.default()))
            continue
        flush_run()
        missing = {} if f.is_struct and not f.is_array else codec.default()
        r, w = _single_steps(f.key, codec, () if isinstance(missing, list) else missing)
        read_steps.append(r)
        write_steps.append(w)
    flush_run()
    if flexible:
        r, w = _tag_steps(tagged) if tagged else (_skip_tags_read, _empty_tags_write)
        read_steps.append(r)
        write_steps.append(w)

    def read(r: Reader) -> Struct:
        d: Struct = {}
        for step in read_steps:
            step(r, d)
        return d

    def write(out: bytearray, d: Any) -> None:
        if not isinstance(d, dict):
            raise EncodeError(f"expected a dict for a struct, got {type(d).__name__}")
        for step in write_steps:
            step(out, d)

    def default() -> Struct:
        return {key: factory() for key, factory in defaults}

    return _TypeCodec(read, write, min_size, None, default)


class BodyCodec:
    """A message schema compiled for one version.

    ``read``/``decode`` raise only :class:`ProtocolError`; ``write``/``encode`` raise only
    :class:`EncodeError`. Decoded dicts are fresh and owned by the caller.
    """

    __slots__ = ("_default", "_read", "_write", "flexible", "name", "version")

    def __init__(
        self, name: str, fields: tuple[Field, ...], version: int, flexible: bool
    ) -> None:
        self.name = name
        self.version = version
        self.flexible = flexible
        compiled = _compile_struct(fields, version, self.flexible)
        self._read: Callable[[Reader], Struct] = compiled.read
        self._write = compiled.write
        self._default: Callable[[], Struct] = compiled.default

    def read(self, r: Reader) -> Struct:
        """Decode one struct at the reader's position."""
        try:
            return self._read(r)
        except _DECODE_FAULTS as exc:  # defensive: primitives already raise ProtocolError
            raise ProtocolError(f"malformed {self.name} v{self.version}: {exc}") from exc

    def decode(self, data: bytes | bytearray | memoryview) -> Struct:
        """Decode ``data``, which must hold exactly one struct."""
        r = Reader(data)
        body = self.read(r)
        r.expect_end()
        return body

    def write(self, out: bytearray, body: Struct) -> None:
        """Append the encoding of ``body`` to ``out``."""
        try:
            self._write(out, body)
        except EncodeError:
            raise
        except _ENCODE_FAULTS as exc:
            raise EncodeError(f"cannot encode {self.name} v{self.version}: {exc}") from exc

    def encode(self, body: Struct) -> bytes:
        out = bytearray()
        self.write(out, body)
        return bytes(out)

    def default(self) -> Struct:
        """A body with every field of this version at its default."""
        return self._default()
