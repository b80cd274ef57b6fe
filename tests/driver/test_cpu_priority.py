"""The driver's background threads yield the CPU to the voters: real nice values."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from driver.config import config_from_properties, voter_affinity
from driver.cpu_priority import BACKGROUND_NICE, lower_process_threads, lower_this_thread


def test_a_thread_is_lowered_and_the_others_keep_their_priority() -> None:
    seen: dict[str, int] = {}

    def background() -> None:
        lower_this_thread()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker = threading.Thread(target=background)
    worker.start()
    worker.join()
    assert seen["nice"] == max(before, BACKGROUND_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_every_thread_of_another_process_is_lowered() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import threading, time\n"
         "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in "
         "range(3)]\nprint('up', flush=True)\ntime.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert lower_process_threads(child.pid) == 4
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        expected = max(os.getpriority(os.PRIO_PROCESS, 0), BACKGROUND_NICE)  # never lowered
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {expected}
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert lower_process_threads(child.pid) == 0  # gone: nothing to do, no error


def test_the_voters_cpu_affinity_is_checked() -> None:
    assert config_from_properties({"kraft.cpu.affinity": "role"}).cpu_affinity == "role"
    with pytest.raises(ValueError, match=r"kraft\.cpu\.affinity must be one of none, role"):
        config_from_properties({"kraft.cpu.affinity": "fast"})


def test_the_voters_cpu_affinity_defaults_to_role_on_a_local_master() -> None:
    """Unset: role when every voter shares this machine's cores (a local master), none on a
    cluster; a configured value is kept either way."""
    unset = config_from_properties({})
    assert voter_affinity(unset, local_master=True) == "role"
    assert voter_affinity(unset, local_master=False) == "none"
    chosen = config_from_properties({"kraft.cpu.affinity": "none"})
    assert voter_affinity(chosen, local_master=True) == "none"
