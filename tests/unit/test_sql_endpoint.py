"""``<data-dir>/sql.endpoint``: published, read back and withdrawn, also on a first start whose
data directory does not exist yet (``make run``'s ``./data``: the start failed on it)."""

from __future__ import annotations

from pathlib import Path

from kraft_spark.sql_endpoint import publish, published, url_of, withdraw


def test_publish_creates_the_data_directory_and_withdraw_removes_the_file(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"  # not created: a first start
    assert published(str(data_dir)) is None
    publish(str(data_dir), url_of("127.0.0.1", 15002))
    assert published(str(data_dir)) == "sc://127.0.0.1:15002"
    withdraw(str(data_dir))
    assert published(str(data_dir)) is None
    withdraw(str(data_dir))  # twice: nothing to do
    assert url_of("::1", 15002) == "sc://[::1]:15002"
