"""Which cluster a warehouse belongs to: ``<warehouse>/_kraft_cluster_id``.

The application's cluster id lives in its data directory (``cluster.id``) and, since the
warehouse outlives executors and even the driver's disk, beside the tables too. A driver with a
new data directory adopts the warehouse's id (so a restore keeps the cluster id); a data
directory and a warehouse of different clusters are refused before anything is written.
"""

from __future__ import annotations

from kraft_spark.warehouse.location import WarehouseError, WarehouseFiles

ID_FILE = "_kraft_cluster_id"


def settle_cluster_id(data_dir: str, files: WarehouseFiles, new_id: str) -> tuple[str, str]:
    """The cluster id to run with and how it was chosen (``kept``, ``adopted`` from the
    warehouse, ``new``). ``new_id`` is used when neither place has one. Raises WarehouseError
    when they disagree."""
    from kraft_spark.commands.local import read_cluster_id, write_cluster_id

    local = read_cluster_id(data_dir)
    stored = files.read(ID_FILE).decode("utf-8", "replace").strip() if (
        ID_FILE in files.list()) else None
    if local and stored and local != stored:
        raise WarehouseError(
            f"the warehouse {files.warehouse} belongs to cluster {stored}, the data directory "
            f"{data_dir} to cluster {local}: point kraft.warehouse.uri at cluster {local}'s "
            f"warehouse, or start with cluster {stored}'s data directory (or an empty one, "
            "which adopts the warehouse's cluster)")
    how = "kept" if local else "adopted" if stored else "new"
    chosen = local or stored or new_id
    if not local:
        write_cluster_id(data_dir, chosen)
    if not stored:
        files.write(f"{chosen}\n".encode(), ID_FILE)
    return chosen, how
