"""At start-up, before anything is written: the warehouse is reachable and writable, and it
belongs to this application's cluster (``kraft_spark.warehouse.identity``)."""

from __future__ import annotations

import os
import uuid
from typing import Any

from driver.console import progress
from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.warehouse.location import LOCATION_FILE


def open_warehouse(data_dir: str, warehouse: str, spark: Any) -> tuple[str, bool]:
    """The cluster id to run with, and whether the cluster is new (no id in the data directory
    or the warehouse: nothing to restore). Raises WarehouseError naming the cause and the fix."""
    from kraft_spark.warehouse.identity import settle_cluster_id
    from kraft_spark.warehouse.location import WarehouseFiles, check_writable

    check_writable(warehouse, spark)
    cluster_id, how = settle_cluster_id(data_dir, WarehouseFiles(warehouse, spark),
                                        uuid.uuid4().hex[:22])
    atomic_write(RealFileSystem(), os.path.join(data_dir, LOCATION_FILE),
                 f"{warehouse}\n".encode())  # for `kraft-spark sql`
    if how == "adopted":
        progress(f"cluster id {cluster_id} adopted from the warehouse {warehouse} (the data "
                 f"directory {data_dir} had none)")
    return cluster_id, how == "new"
