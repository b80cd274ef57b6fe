"""How the driver starts a generation's fresh voters (driver/quorum_restore.py) without a
warehouse involved: a voter whose log directory is unusable stops the application with the
cause and the fix; fresh voters beside voters with logs start as they are; each generation is
decided once. (Restores from a real warehouse: tests/spark/test_restore.py, test_application.py,
test_multihost.py.)"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from driver.quorum_restore import CannotStart, release_voters
from executors.voter import VoterSettings, prepare_log_dir


class Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def release(self, voter_id: int, line: str, payload: bytes = b"") -> None:
        self.sent.append((voter_id, line))


def _app() -> Any:
    return SimpleNamespace(control=Channel(), released_generation=-1)


def _hello(voter: int, generation: int = 0, **extra: Any) -> dict[str, Any]:
    return {"voter_id": voter, "generation": generation, "host": "127.0.0.1", "port": 1,
            "directory_id": f"dir{voter}", **extra}


def test_an_unwritable_log_directory_is_reported_with_the_setting_to_fix(
        tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the log root should be")
    settings = VoterSettings(cluster_id="c" * 22, voters=1, log_root=str(blocker / "voters"),
                             control_host="127.0.0.1", control_port=1, generation=0)
    with pytest.raises(OSError):
        prepare_log_dir(settings, 0)
    hellos = {0: _hello(0, error="NotADirectoryError: ...", log_dir=str(blocker / "voters"),
                        executor_host="127.0.0.3"), 1: _hello(1)}
    with pytest.raises(CannotStart, match=r"voter 0 on 127.0.0.3: cannot use its log directory"
                       r" under .*not-a-dir/voters.*set kraft.voter.log.dir to a writable"):
        release_voters(_app(), hellos)


def test_the_log_root_expands_this_hosts_environment(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRAFT_TEST_HOST_DIR", str(tmp_path / "host-a"))
    settings = VoterSettings(cluster_id="c" * 22, voters=1, log_root="${KRAFT_TEST_HOST_DIR}/v",
                             control_host="127.0.0.1", control_port=1, generation=0)
    log_dir, _, disk_lost, fresh = prepare_log_dir(settings, 2)
    assert log_dir == os.path.join(tmp_path, "host-a", "v", "node-2")
    assert fresh and not disk_lost
    assert prepare_log_dir(settings, 2)[3] is False  # formatted now: not fresh any more


def test_fresh_voters_beside_voters_with_logs_start_and_each_generation_once() -> None:
    app = _app()
    hellos = {0: _hello(0, fresh=True), 1: _hello(1, fresh=False), 2: _hello(2, fresh=True)}
    assert release_voters(app, hellos) == "start"
    assert app.control.sent == [(0, "start"), (2, "start")]
    assert release_voters(app, hellos) == "none"  # a second refollow of that generation
    assert app.control.sent == [(0, "start"), (2, "start")]
    assert release_voters(app, {0: _hello(0, 1)}) == "none"  # no fresh voter waits
