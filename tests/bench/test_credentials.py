"""The benchmarks' clients take their tokens from the credentials file the system under test
names (``bench.credentials``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.credentials import Tokens, bearer
from kraft_spark.http_auth import CREDENTIALS_FILE, load_or_create
from kraft_spark.secret_files import SecretFileError, write_secret


def test_tokens_are_one_of_each_scope_from_the_file_the_start_up_line_names(
        tmp_path: Path) -> None:
    path = str(tmp_path / CREDENTIALS_FILE)
    credentials, created = load_or_create(path)  # as `kraft-spark local` / `run` create it
    assert created
    tokens = Tokens.printed({"http": "http://127.0.0.1:1", "credentials": path}, "local")
    assert tokens == Tokens.in_data_dir(str(tmp_path))
    assert (tokens.read, tokens.write, tokens.admin) == (
        credentials.entries[2].token, credentials.entries[1].token, credentials.entries[0].token)
    assert len({tokens.read, tokens.write, tokens.admin}) == 3
    assert tokens.write not in repr(tokens) and path in repr(tokens)  # never logged
    assert bearer(tokens.write) == {"Authorization": f"Bearer {tokens.write}"}
    assert bearer(None) == {}


def test_a_start_up_line_without_a_credentials_file_is_an_error_that_says_why() -> None:
    with pytest.raises(RuntimeError, match="kraft-spark run printed no credentials file"):
        Tokens.printed({"http": "http://127.0.0.1:1"}, "kraft-spark run")


def test_a_file_without_every_scope_or_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "creds")
    write_secret(path, "admin a0 admin\nwrite w0 writer\n")
    with pytest.raises(RuntimeError, match="no read credential"):
        Tokens.load(path)
    (tmp_path / "creds").chmod(0o644)
    with pytest.raises(SecretFileError, match="chmod 600"):
        Tokens.load(path)
