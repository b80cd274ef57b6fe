"""Secret files: created owner-only, refused when others can read them (ssh's rule), never
quoted in an error."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import pytest

from kraft_spark import secret_files
from kraft_spark.secret_files import (
    SecretFileError,
    new_token,
    private_dir,
    read_secret,
    write_secret,
)


def test_written_owner_only_even_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "sub" / "token"
        write_secret(str(path), "abc\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_secret(str(path)) == "abc"


def test_rewriting_a_widened_file_narrows_it(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    path.chmod(0o666)
    write_secret(str(path), "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secret(str(path)) == "new"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o602])
def test_group_or_world_access_is_refused_without_quoting_the_secret(
    tmp_path: Path, mode: int
) -> None:
    path = tmp_path / "token"
    write_secret(str(path), "do-not-print-me")
    path.chmod(mode)
    with pytest.raises(SecretFileError) as err:
        read_secret(str(path))
    assert f"{mode:04o} are too open" in str(err.value)
    assert f"chmod 600 {path}" in str(err.value)
    assert "do-not-print-me" not in str(err.value)


def test_missing_and_empty_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SecretFileError, match="no such file"):
        read_secret(str(tmp_path / "absent"))
    write_secret(str(tmp_path / "empty"), "  \n")
    with pytest.raises(SecretFileError, match="empty"):
        read_secret(str(tmp_path / "empty"))


def test_tokens_are_fresh_and_long() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) >= 43 for t in tokens)


def test_private_dir_keeps_an_existing_directorys_mode(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o755)
    private_dir(str(tmp_path / "d"))
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    private_dir(str(tmp_path / "e" / "f"))
    assert stat.S_IMODE((tmp_path / "e" / "f").stat().st_mode) == 0o700
    # The parents it creates are owner-only too (os.makedirs's mode would leave them 0755).
    assert stat.S_IMODE((tmp_path / "e").stat().st_mode) == 0o700
    old = os.umask(0)
    try:
        private_dir(str(tmp_path / "g" / "h" / "i"))
    finally:
        os.umask(old)
    for path in (tmp_path / "g", tmp_path / "g" / "h", tmp_path / "g" / "h" / "i"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    (tmp_path / "g" / "file").touch()
    with pytest.raises(OSError):  # a file where a parent directory should be
        private_dir(str(tmp_path / "g" / "file" / "x"))


def test_new_tokens_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # One in 64 url-safe tokens did: `--token -x...` then reads as an option on a command line.
    assert not any(new_token().startswith("-") for _ in range(2000))
    draws = iter(["-dash-first", "-again", "fine-token"])
    # new_token imports secrets when called: patch the module itself.
    monkeypatch.setattr(secrets, "token_urlsafe", lambda _n: next(draws))
    assert secret_files.new_token() == "fine-token"
