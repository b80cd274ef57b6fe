"""The HTTP API's JSON rules: parsing and validating request bodies and record values
(depth, servability, UTF-8), turning them into records and back, idempotency fingerprints,
reading a body within its limit, and the wording of validation errors."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, Final

from starlette.types import Receive

from api.models import (
    MAX_RECORDS_PER_REQUEST,
    MAX_VALUE_DEPTH,
    RECORD_SHAPE,
    ApiError,
    RecordOut,
    ReplicaStateOut,
)
from kraft_spark.client.types import (
    AppendRecord,
    CommittedRecord,
    payload_bytes,
)
from kraft_spark.raft.records import Header, Record
from kraft_spark.store.reserved_headers import Standing, record_refusal

PARAM_KINDS: Final = {"query": "query parameter ", "header": "header ", "path": "path parameter "}
JSON_TYPES: Final = {
    dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
    bool: "a boolean", type(None): "null",
}


def loc(parts: Sequence[int | str]) -> str:
    if len(parts) == 2 and parts[0] in PARAM_KINDS:
        return f"{PARAM_KINDS[str(parts[0])]}{parts[1]}"
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


def describe_errors(errors: Sequence[Any], limit: int = 5) -> str:
    parts = []
    for err in errors[:limit]:
        kind = err.get("type")
        if kind == "extra_forbidden":
            message = "unknown field"
        elif kind == "missing":
            message = "required field is missing"
        else:
            message = str(err.get("msg", "invalid"))
        parts.append(f"{loc(err.get('loc', ()))}: {message}")
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


# --------------------------------------------------------------------------- body handling


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(body: bytes) -> Any:
    if not body.strip():
        raise ApiError(400, "the request body is empty: send a JSON object. " + RECORD_SHAPE)
    try:
        return json.loads(body, parse_constant=reject_constant)
    except RecursionError:
        raise ApiError(400, "the request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN/Infinity
        raise ApiError(
            400, f"the request body is not valid JSON ({exc}): fix the JSON syntax and retry"
        ) from None


# Compact JSON for stored values; one encoder for all (json.dumps with options builds a new
# encoder per call, a measurable share of a 100-record batch).
VALUE_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_value(value: Any, index: int) -> bytes | None:
    if value is None:
        return None
    if type(value) is str and value.isascii():
        # The common case, byte for byte what VALUE_JSON.encode gives a str (that method
        # calls this function): an ASCII string holds no lone surrogate and nests nothing,
        # so ``unservable`` has nothing to find (a fifth of a 100-record batch's parse).
        return encode_basestring_ascii(value).encode("ascii")
    try:
        encoded = VALUE_JSON.encode(value).encode("utf-8")
    except ValueError:
        raise ApiError(
            422, f"records[{index}].value holds a number JSON cannot represent (too large)"
        ) from None
    problem = unservable(value, encoded)
    if problem is not None:
        # Accepting it would acknowledge a record that no HTTP read could return.
        raise ApiError(422, f"records[{index}].value {problem}: fix the value")
    return encoded


def unservable(value: Any, encoded: bytes) -> str | None:
    """Why ``value`` (``encoded``: its compact JSON, ASCII with escapes) cannot be served back
    as JSON, or None: a string holding a lone UTF-16 surrogate (JSON's ``\\ud800`` escape
    makes one; no UTF-8 text can carry it) or nesting deeper than MAX_VALUE_DEPTH. Only walks
    the value when its JSON text has a surrogate escape or that many brackets."""
    surrogate = b"\\ud" in encoded or b"\\uD" in encoded
    if not surrogate and encoded.count(b"[") + encoded.count(b"{") <= MAX_VALUE_DEPTH:
        return None
    return walk_unservable(value, 0)


def walk_unservable(value: Any, depth: int) -> str | None:
    """``depth``: the lists and objects around ``value``."""
    kind = type(value)
    if kind is str:
        return None if is_utf8(value) else LONE_SURROGATE
    if (kind is list or kind is dict) and depth >= MAX_VALUE_DEPTH:
        return f"is nested more than {MAX_VALUE_DEPTH} levels deep"
    if kind is list:
        for item in value:
            problem = walk_unservable(item, depth + 1)
            if problem is not None:
                return problem
    elif kind is dict:
        for name, item in value.items():
            problem = LONE_SURROGATE if not is_utf8(name) else walk_unservable(item, depth + 1)
            if problem is not None:
                return problem
    return None


LONE_SURROGATE: Final = (
    "holds a string with a lone UTF-16 surrogate escape (such as \\ud800), which is not "
    "Unicode text"
)


RecordFields = tuple[str, Any, dict[str, str]]  # key, value, headers: a validated record


def to_records(records: Iterable[RecordFields]) -> list[AppendRecord]:
    """The request's records as the log will hold them, stamped with the time they were taken:
    built once, whichever path appends them (kraft_spark.client.types.stamped)."""
    now = int(time.time() * 1000)
    out: list[AppendRecord] = []
    append = out.append
    for index, (key, value, headers) in enumerate(records):
        # Positional: the hot loop of a 100-record batch (keywords cost a tenth more).
        record = Record(key.encode("utf-8"), encode_value(value, index), now,
                        _encoded_headers(headers, index) if headers else ())
        if headers:
            _refuse_reserved(index, record)
        append(record)
    return out


def _refuse_reserved(index: int, record: Record) -> None:
    """The caller's own headers may not hold the store's reserved ones (the rule every way
    into the log applies, kraft_spark.store.reserved_headers): the API writes those itself,
    from the ``conditions`` and ``lease_id`` fields and /v1/leases, and answers their real
    outcome. Checked before the API adds its own."""
    refused = record_refusal(index, record, 1, Standing.HTTP_CALLER)
    if refused is not None:
        raise ApiError(422, str(refused))


def _encoded_headers(headers: dict[str, str], index: int) -> tuple[Header, ...]:
    if not all(is_utf8(name) and is_utf8(v) for name, v in headers.items()):
        # The models let these through (they check a str key, not dict entries, as text).
        raise ApiError(
            422, f"records[{index}].headers: a header name or value is not valid Unicode "
            "text (a lone surrogate escape such as \\ud800): fix the header"
        )
    return tuple((name, v.encode("utf-8")) for name, v in headers.items())


def plain_record(item: Any) -> bool:
    """True when ``item`` is an object RecordIn accepts: a non-empty string ``key``, a
    ``value``, optional string-to-string ``headers``, nothing else. JSON gives exact types,
    so ``type(...) is`` is the strict check."""
    if type(item) is not dict or "value" not in item:
        return False
    key = item.get("key")
    if type(key) is not str or not key or not is_utf8(key):
        return False
    if len(item) == 2:
        return True
    headers = item.get("headers")
    return (len(item) == 3 and type(headers) is dict
            and all(type(v) is str for v in headers.values()))


def is_utf8(text: str) -> bool:
    """False for strings UTF-8 cannot encode (lone surrogates, which JSON's \\ud800 escapes
    can produce): pydantic refuses those as strings, so the fast check must too."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def plain_fields(parsed: dict[str, Any]) -> list[RecordFields] | None:
    """The records of a body that is plainly valid, checked by hand, or None: then the
    pydantic models validate it and say what is wrong. Same acceptance as BatchIn/RecordIn
    (tests hold the two to it); the models cost about 2 µs per record, the sidecar's largest
    share of a 100-record batch."""
    if "records" in parsed:
        items = parsed["records"]
        if (len(parsed) != 1 or type(items) is not list
                or not 1 <= len(items) <= MAX_RECORDS_PER_REQUEST):
            return None
    else:
        items = [parsed]
    if not all(plain_record(item) for item in items):
        return None
    return [(item["key"], item["value"], item.get("headers") or {}) for item in items]


def record_size(record: AppendRecord) -> int:
    return payload_bytes(record.key, record.value, record.headers)


def records_fingerprint(records: Sequence[AppendRecord]) -> bytes:
    digest = hashlib.sha256()

    def part(data: bytes | None) -> None:
        if data is None:
            digest.update(b"\x00")
        else:
            digest.update(b"\x01" + len(data).to_bytes(8, "big") + data)

    digest.update(len(records).to_bytes(8, "big"))
    for record in records:
        part(record.key)
        part(record.value)
        digest.update(len(record.headers).to_bytes(8, "big"))
        for name, value in record.headers:
            part(name.encode("utf-8"))
            part(value)
    return digest.digest()


def is_json_content_type(value: str | None) -> bool:
    if value is None:
        return True  # lenient for clients that send none
    media = value.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return True
    return media.startswith("application/") and media.endswith("+json")


async def read_limited(declared: str | None, chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The request body (``declared``: its Content-Length header), refusing more than ``limit``
    bytes before buffering them."""
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise ApiError(400, f"invalid Content-Length header {declared!r}") from None
        if length > limit:
            raise ApiError(
                413,
                f"the request body is {length} bytes, over the limit of {limit} bytes: "
                "send fewer or smaller records per request",
            )
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise ApiError(
                413,
                f"the request body exceeds the limit of {limit} bytes: "
                "send fewer or smaller records per request",
            )
    return bytes(body)


async def asgi_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body chunks of an ASGI request."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


# --------------------------------------------------------------------------- output conversion


def decode_value(value: bytes | None) -> Any:
    """A stored value as JSON when it is JSON that can be served back, else as text (values
    written by other clients need not be JSON; see unservable)."""
    if value is None:
        return None
    try:
        decoded = json.loads(value, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        return value.decode("utf-8", errors="replace")
    if unservable(decoded, value) is not None:
        return value.decode("utf-8", errors="replace")
    return decoded


# The API's JSON for what it serves: compact, UTF-8, no NaN or Infinity.
SERVE_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def value_json(value: bytes | None) -> str:
    """A stored value as the JSON text the API serves (``decode_value``); a number JSON
    cannot carry (1e400 parses as inf) is served as its text, like any value that is not
    JSON."""
    try:
        return SERVE_JSON(decode_value(value))
    except ValueError:
        assert value is not None
        return SERVE_JSON(value.decode("utf-8", errors="replace"))


def record_out(record: CommittedRecord) -> RecordOut:
    return RecordOut(
        offset=record.offset,
        epoch=record.epoch,
        timestamp=record.timestamp_ms,
        key=None if record.key is None else record.key.decode("utf-8", errors="replace"),
        value=decode_value(record.value),
        headers={
            name: None if value is None else value.decode("utf-8", errors="replace")
            for name, value in record.headers
        },
    )


def replica_out(replica: Any) -> ReplicaStateOut:
    return ReplicaStateOut(
        replicaId=replica.replica_id,
        directoryId=replica.directory_id,
        logEndOffset=replica.log_end_offset,
        lastFetchTimestamp=replica.last_fetch_timestamp,
        lastCaughtUpTimestamp=replica.last_caught_up_timestamp,
    )


# --------------------------------------------------------------------------- idempotency
