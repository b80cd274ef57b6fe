"""SQL views of the leases (``kraft_spark.store.leases``) over the Delta tables.

Leases live in the log as keyless ``records`` rows with the header ``kraft.lease.op``; a key
is attached by the header ``kraft.lease`` of the row that last wrote it. Two views answer the
questions people ask, computed from the tables (so they agree with the log exactly and travel
in time with them):

* ``leases``: one row per lease ever granted: ``lease_id``, ``ttl_ms``, ``owner`` (the HTTP
  credential that granted it; null when none did), ``granted_offset``,
  ``granted_at``, ``last_keepalive_at`` (the grant counts as one), ``ended_offset``,
  ``ended_at``, ``ended_by`` (``revoke`` or ``expire``; null while alive), ``alive`` and
  ``keys`` (the keys attached to it now).
* ``snapshot_leases``: the ``snapshot`` table with each key's ``lease_id`` (null: none).

``snapshot`` has a ``lease`` column of its own now (the state machine's; null in rows written
before it existed): the view reads each key's lease from ``records``, so older rows have it
too. The views are defined the same way on the application's catalog and on ``kraft-spark
sql``'s session.
Operations that failed (a keep-alive of a lease already gone, an ``expire`` voided by a later
keep-alive: ``kraft.txn.outcome = failed``) are left out.
"""

from __future__ import annotations

from typing import Any

from kraft_spark.store.leases import LEASE_HEADER, LEASE_OP_HEADER
from kraft_spark.store.txn import OUTCOME_HEADER

VIEWS = ("leases", "snapshot_leases")

_OPS = f"""
SELECT offset, timestamp,
       get_json_object(headers['{LEASE_OP_HEADER}'], '$.op') AS op,
       CAST(get_json_object(headers['{LEASE_OP_HEADER}'], '$.id') AS BIGINT) AS lease_id,
       CAST(get_json_object(headers['{LEASE_OP_HEADER}'], '$.ttl_ms') AS BIGINT) AS ttl_ms,
       get_json_object(headers['{LEASE_OP_HEADER}'], '$.owner') AS owner
FROM records
WHERE headers['{LEASE_OP_HEADER}'] IS NOT NULL AND headers['{OUTCOME_HEADER}'] IS NULL
"""

SNAPSHOT_LEASES_SQL = f"""
SELECT s.*, CAST(r.headers['{LEASE_HEADER}'] AS BIGINT) AS lease_id
FROM snapshot s LEFT JOIN records r ON r.offset = s.offset
"""

LEASES_SQL = f"""
WITH ops AS ({_OPS}),
granted AS (
  SELECT lease_id, first(ttl_ms) AS ttl_ms, first(owner) AS owner,
         min(offset) AS granted_offset, min(timestamp) AS granted_at
  FROM ops WHERE op = 'grant' GROUP BY lease_id),
kept AS (
  SELECT lease_id, max(timestamp) AS last_keepalive_at
  FROM ops WHERE op IN ('grant', 'keepalive') GROUP BY lease_id),
ended AS (
  SELECT lease_id, max(offset) AS ended_offset, max(timestamp) AS ended_at,
         max_by(op, offset) AS ended_by
  FROM ops WHERE op IN ('revoke', 'expire') GROUP BY lease_id),
attached AS (
  SELECT lease_id, sort_array(collect_list(key)) AS keys
  FROM ({SNAPSHOT_LEASES_SQL}) WHERE lease_id IS NOT NULL GROUP BY lease_id)
SELECT g.lease_id, g.ttl_ms, g.owner, g.granted_offset, g.granted_at, k.last_keepalive_at,
       e.ended_offset, e.ended_at, e.ended_by, e.lease_id IS NULL AS alive,
       coalesce(a.keys, array()) AS keys
FROM granted g
LEFT JOIN kept k ON k.lease_id = g.lease_id
LEFT JOIN ended e ON e.lease_id = g.lease_id
LEFT JOIN attached a ON a.lease_id = g.lease_id
"""


def register_lease_views(spark: Any, temporary: bool) -> None:
    """Define the views over the tables named ``records`` and ``snapshot`` in ``spark``'s
    catalog (``temporary``: session views, as over ``kraft-spark sql``'s temporary tables)."""
    kind = "TEMPORARY VIEW" if temporary else "VIEW"
    spark.sql(f"CREATE OR REPLACE {kind} snapshot_leases AS {SNAPSHOT_LEASES_SQL}")
    spark.sql(f"CREATE OR REPLACE {kind} leases AS {LEASES_SQL}")
