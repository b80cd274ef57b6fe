"""At start-up, before anything is written: the warehouse is reachable and writable, and it
belongs to this application's cluster (``kraft_spark.warehouse.identity``)."""

from __future__ import annotations

import uuid
from typing import Any

from driver.console import progress


def open_warehouse(data_dir: str, warehouse: str, spark: Any) -> str:
    """The cluster id to run with. Raises WarehouseError naming the cause and the fix."""
    from kraft_spark.warehouse.identity import settle_cluster_id
    from kraft_spark.warehouse.location import WarehouseFiles, check_writable

    check_writable(warehouse, spark)
    cluster_id, how = settle_cluster_id(data_dir, WarehouseFiles(warehouse, spark),
                                        uuid.uuid4().hex[:22])
    if how == "adopted":
        progress(f"cluster id {cluster_id} adopted from the warehouse {warehouse} (the data "
                 f"directory {data_dir} had none)")
    return cluster_id
