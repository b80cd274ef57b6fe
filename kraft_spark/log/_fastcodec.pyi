"""Type stub of the C codec (kraft_spark/log/_fastcodec.c); used through kraft_spark.log.codec."""

from kraft_spark.raft.records import Batch, Record

def encode_batch(batch: Batch, /) -> bytearray:
    """The Kafka v2 bytes of ``batch`` with the CRC field (bytes 17..20) left zero."""

def decode_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_ts: int,
    record_type: type[Record],
    error_type: type[Exception],
    direct: bool,
    /,
) -> tuple[Record, ...]:
    """The ``count`` records of ``buf[pos:end]``; raises ``error_type`` for bad bytes."""
