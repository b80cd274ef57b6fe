"""Hypothesis strategies generated from the schemas themselves.

Every field a schema declares at a version gets a value of its type (``None`` too where the
field is nullable at that version), so a new message or field is covered by the property tests
without touching them. Generated bodies are *full* (every field present), which is exactly what
the decoder returns, so ``decode(encode(body)) == body``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kraft_spark.protocol.fields import Field
from kraft_spark.protocol.schema import MessageSchema

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

MAX_ARRAY = 3


def _primitive(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in _INT_RANGES:
        lo, hi = _INT_RANGES[type_name]
        return st.integers(lo, hi)
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "bool":
        return st.booleans()
    if type_name == "string":
        return st.text(max_size=12)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=24)
    if type_name == "uuid":
        return st.uuids()
    raise AssertionError(f"no strategy for {type_name}")


def _field(f: Field, version: int) -> st.SearchStrategy[Any]:
    strategy: st.SearchStrategy[Any]
    if f.is_struct:
        elem = struct_strategy(f.fields, version)
        strategy = st.lists(elem, max_size=MAX_ARRAY) if f.is_array else elem
    elif f.is_array:
        strategy = st.lists(_primitive(f.element_type), max_size=MAX_ARRAY)
    else:
        strategy = _primitive(f.type)
    if f.nullable_in(version):
        strategy = st.none() | strategy
    return strategy


def struct_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Full dicts for a struct at ``version``."""
    return st.fixed_dictionaries(
        {f.key: _field(f, version) for f in fields if f.present_in(version)}
    )


def body_strategy(schema: MessageSchema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Full bodies of ``schema`` at ``version``."""
    return struct_strategy(schema.fields, version)
