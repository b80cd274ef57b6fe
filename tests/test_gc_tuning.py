"""The collector settings of server processes (kraft_spark/gc_tuning.py).

Each case runs in a fresh interpreter: the settings are process-wide, and this test process must
keep CPython's defaults for the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kraft_spark.gc_tuning import ENV_VAR, YOUNG_THRESHOLD

_PROBE = """
import gc, json
from kraft_spark.gc_tuning import tune_for_serving
before = gc.get_threshold()
tune_for_serving()
frozen = gc.get_freeze_count()
tune_for_serving()  # a second call changes nothing
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen,
                  "frozen_again": gc.get_freeze_count()}))
"""


def _probe(setting: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if setting is not None:
        env[ENV_VAR] = setting
    return subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_server_processes_freeze_start_up_objects_and_raise_thresholds() -> None:
    result = _probe(None)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["before"] == [700, 10, 10]
    assert out["after"] == [YOUNG_THRESHOLD, 20, 20]
    assert out["frozen"] > 1000  # the imported modules at least
    assert out["frozen_again"] == out["frozen"]


def test_a_number_sets_the_young_threshold() -> None:
    result = _probe("5000")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["after"] == [5000, 20, 20]


def test_default_keeps_cpythons_settings() -> None:
    result = _probe("default")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["after"] == [700, 10, 10]
    assert out["frozen"] == 0


@pytest.mark.parametrize("bad", ["fast", "0", "-3", "1.5"])
def test_a_malformed_setting_names_the_variable_and_the_accepted_values(bad: str) -> None:
    result = _probe(bad)
    assert result.returncode != 0
    assert f"{ENV_VAR}={bad!r}" in result.stderr
    assert "'default'" in result.stderr and "positive" in result.stderr
