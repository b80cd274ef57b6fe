"""A directory id that starts with "-" (URL-safe base64: one in 32 of them) is read as the value
of ``--controller-directory-id`` / ``-d``, not as an option (CI run 52's failure)."""

from __future__ import annotations

import pytest

from kraft_spark.cli import build_parser
from kraft_spark.commands.directory_args import join_directory_ids

DASHED = "-JweK07fQEKB8EDLMonlsw"  # the id CI drew
PLAIN = "OGKOlAU-SnudRP2ShvDtuA"


@pytest.mark.parametrize("flag", ["--controller-directory-id", "-d"])
def test_a_dashed_directory_id_parses_as_the_value(flag: str) -> None:
    argv = ["metadata-quorum", "--bootstrap-controller", "127.0.0.1:9093", "remove-controller",
            "--controller-id", "2", flag, DASHED, "--dry-run"]
    args = build_parser().parse_args(join_directory_ids(argv))
    assert (args.controller_id, args.controller_directory_id, args.dry_run) == (2, DASHED, True)


def test_only_directory_values_are_joined() -> None:
    assert join_directory_ids(["-d", PLAIN]) == ["-d", PLAIN]  # no dash: argparse reads it
    assert join_directory_ids(["-d", "--dry-run"]) == ["-d", "--dry-run"]  # an option stays one
    assert join_directory_ids(["--controller-id", DASHED]) == ["--controller-id", DASHED]
    assert join_directory_ids(["-d", DASHED]) == [f"--controller-directory-id={DASHED}"]
    assert join_directory_ids(["-d"]) == ["-d"]  # argparse names the missing value
