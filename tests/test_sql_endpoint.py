"""``<data-dir>/sql.endpoint``: published, read back and withdrawn, also on a first start whose
data directory does not exist yet (``make run``'s ``./data``: the start failed on it)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kraft_spark.secret_files import SecretFileError
from kraft_spark.sql_endpoint import (
    TOKEN_FILE,
    connect_url,
    publish,
    published,
    url_of,
    withdraw,
)


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


def test_the_token_is_kept_owner_only_and_given_to_clients_over_localhost(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    publish(str(data_dir), url_of("127.0.0.1", 15002), "s3cret-token")
    token_file = data_dir / TOKEN_FILE
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    # pyspark sends a token without TLS only to the host named localhost.
    assert connect_url(str(data_dir)) == "sc://localhost:15002/;token=s3cret-token"
    token_file.chmod(0o644)  # others could read it: refused, with the fix
    with pytest.raises(SecretFileError, match=r"too open.*chmod 600"):
        connect_url(str(data_dir))
    withdraw(str(data_dir))
    assert not token_file.exists()
    assert connect_url(str(data_dir)) is None


def test_a_server_bound_elsewhere_keeps_its_host_in_the_url(tmp_path: Path) -> None:
    publish(str(tmp_path), url_of("10.1.2.3", 15002), "t")
    assert connect_url(str(tmp_path)) == "sc://10.1.2.3:15002/;token=t"
