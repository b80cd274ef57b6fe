"""Type stub of kraft_spark/log/_gc_untrack.c; used through kraft_spark.log.gc_untrack."""

def untrack_batch(batch: object, batch_type: type, record_type: type, /) -> int:
    """Objects of ``batch`` taken out of the cyclic garbage collector."""
