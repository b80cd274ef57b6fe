"""The workloads every system of ``bench compare`` is measured on, in the report's order
(shared by the runner, ``compare``, and the report, ``report``)."""

from __future__ import annotations

from typing import NamedTuple

BATCH_CONNECTIONS = 16


class Workload(NamedTuple):
    """One point of every system: ``label`` is how the results and the report name it."""

    label: str
    connections: int
    records: int  # per append


PLAN: tuple[Workload, ...] = (
    Workload("1 client", 1, 1), Workload("16 clients", 16, 1),
    Workload("256 clients", 256, 1),
    Workload(f"{BATCH_CONNECTIONS} clients, 100-record batches", BATCH_CONNECTIONS, 100),
)
