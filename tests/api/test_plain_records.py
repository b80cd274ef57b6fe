"""The sidecar's hand-written check for plainly valid append bodies must accept exactly what the
pydantic models accept, and read the same fields: it only skips the models' cost, never their
rules. Bodies are generated near the valid shape (right and wrong types, missing and extra
fields, lone surrogates, empty and oversized batches) so both outcomes are exercised."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.models import MAX_RECORDS_PER_REQUEST, BatchIn, RecordIn
from api.values import plain_fields

pytestmark = pytest.mark.loop_free

_text = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["k", "topic/a", "\ud800", "é", "a\udcff"]),
)
_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         _text)
_json_value = st.recursive(
    _json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=6,
)
_headers = st.one_of(
    st.dictionaries(_text, _text, max_size=3),
    st.dictionaries(_text, _json_value, max_size=2),
    _json_value,
)


@st.composite
def _record(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(_json_value)  # not an object at all, sometimes
    record: dict[str, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        record["key"] = draw(st.one_of(_text, _text, _json_value))
    if draw(st.integers(0, 9)) > 0:
        record["value"] = draw(_json_value)
    if draw(st.booleans()):
        record["headers"] = draw(_headers)
    if draw(st.integers(0, 9)) == 0:
        record[draw(st.sampled_from(["ttl", "Key", "records", "x"]))] = draw(_json_scalar)
    return record


@st.composite
def _body(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        record = draw(_record())
        return record if isinstance(record, dict) else {"key": "k", "value": record}
    records: Any = draw(st.one_of(
        st.lists(_record(), max_size=4),
        st.just([{"key": "k", "value": 1}] * (MAX_RECORDS_PER_REQUEST + 1)),
        _json_scalar,
    ))
    body: dict[str, Any] = {"records": records}
    if draw(st.integers(0, 9)) == 0:
        body["key"] = "k"
    return body


def _by_models(body: dict[str, Any]) -> list[tuple[str, Any, dict[str, str]]] | None:
    try:
        items = (BatchIn.model_validate(body).records if "records" in body
                 else [RecordIn.model_validate(body)])
    except ValidationError:
        return None
    return [(r.key, r.value, r.headers) for r in items]


@settings(max_examples=600, deadline=None)
@given(_body())
def test_plain_check_accepts_exactly_what_the_models_accept(body: dict[str, Any]) -> None:
    # As the sidecar sees it: parsed from JSON text, so every type is a JSON type.
    parsed = json.loads(json.dumps(body))
    assert plain_fields(parsed) == _by_models(parsed)


def test_plain_check_reads_key_value_and_headers() -> None:
    body = {"records": [{"key": "a", "value": {"n": 1}},
                        {"key": "b", "value": None, "headers": {"h": "v"}}]}
    assert plain_fields(body) == [("a", {"n": 1}, {}), ("b", None, {"h": "v"})]
    assert plain_fields({"key": "k", "value": [1], "headers": {}}) == [("k", [1], {})]


def test_plain_check_leaves_bad_bodies_to_the_models() -> None:
    for body in ({"key": "\ud800", "value": 1}, {"key": "k", "value": 1, "headers": {"h": 1}},
                 {"key": "k"}, {"key": "", "value": 1}, {"records": []},
                 {"records": [{"key": "k", "value": 1}], "x": 1}):
        assert plain_fields(body) is None
        assert _by_models(body) is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=127)), _json_value))
def test_a_stored_value_is_the_compact_json_it_always_was(value: Any) -> None:
    """``encode_value``'s ASCII-string shortcut gives the bytes the general path gives (what
    older records in the log hold), and refuses nothing the general path accepts."""
    from api.models import ApiError
    from api.values import VALUE_JSON, encode_value, unservable

    try:
        general = VALUE_JSON.encode(value).encode() if value is not None else None
    except ValueError:  # a number JSON cannot represent: refused either way
        with pytest.raises(ApiError):
            encode_value(value, 0)
        return
    try:
        encoded = encode_value(value, 0)
    except ApiError:
        assert general is not None and unservable(value, general) is not None
        return
    assert encoded == general
