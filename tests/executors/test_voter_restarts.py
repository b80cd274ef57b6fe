"""A voter whose node cannot start (or stops on a storage failure) is started again inside its
Spark task after a backoff, instead of failing the task, which would fail the barrier stage and
every other voter with it (issue 25)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from executors import voter
from kraft_spark.log.meta import format_log_dir
from kraft_spark.net.config import NodeConfig
from tests.integration.harness import free_ports


def test_a_voter_that_cannot_start_is_retried_in_its_task_until_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(voter, "RESTART_FIRST_S", 0.05)
    log_dir = str(tmp_path / "node-0")
    format_log_dir(log_dir, cluster_id="c" * 22, node_id=0)
    state = Path(log_dir) / "__cluster_metadata-0" / "quorum-state"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{ damaged")
    port = free_ports(1)[0]
    config = NodeConfig(node_id=0, log_dir=log_dir, host="127.0.0.1", port=port,
                        voters={0: ("127.0.0.1", port)})

    async def body() -> dict[str, object]:
        hellos: list[dict[str, object]] = []
        writers: list[asyncio.StreamWriter] = []

        async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            hellos.append(json.loads(await reader.readline()))
            writers.append(writer)

        server = await asyncio.start_server(control, "127.0.0.1", 0)
        settings = voter.VoterSettings(
            cluster_id="c" * 22, voters=1, log_root=str(tmp_path), control_host="127.0.0.1",
            control_port=server.sockets[0].getsockname()[1], generation=0, lock_timeout_s=5.0)
        task = asyncio.ensure_future(voter._serve(settings, config, {"voter_id": 0}))
        while caplog.text.count("could not start") < 2:  # refused, waited, refused again
            await asyncio.sleep(0.02)
        assert hellos == [{"voter_id": 0}]  # the driver heard from it before it could start
        assert not task.done()  # the task (and so the barrier stage) lives on
        state.unlink()  # the operator's fix
        while "became Leader" not in caplog.text:
            await asyncio.sleep(0.02)
        writers[0].write(b"stop\n")
        await writers[0].drain()
        result = await asyncio.wait_for(task, 30)
        writers[0].close()
        server.close()
        return result

    with caplog.at_level(logging.INFO):
        result = asyncio.run(body())
    assert result["stopped"] == "driver asked to stop"
    final = result["final"]
    assert isinstance(final, dict) and final["role"] == "leader"
