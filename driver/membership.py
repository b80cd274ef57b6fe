"""The Spark application's voter set (KIP-853): the static count, the voters' directory ids,
the reconcile toward the hosted tasks after each generation, and a live resize. Mixed into
``driver.app.Application``, which owns the fields declared here."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

from driver.config import AppConfig
from driver.console import progress
from driver.control import ControlChannel
from driver.security import client_security
from kraft_spark.client.security import ClientSecurity
from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.protocol.sasl_plain import SaslServerConfig
from kraft_spark.quorum_auth import QuorumAuth

log = logging.getLogger("driver.app")
# A live resize stays within the local master's task slots (see Application.start()).
MAX_LIVE_VOTERS = 5


class VoterMembershipMixin:
    config: AppConfig
    control: ControlChannel | None
    stopping: threading.Event
    target_voters: int
    _resizing: threading.Event
    _reconcile_lock: threading.Lock
    _tasks: dict[int, Any]
    quorum_auth: QuorumAuth | None

    @property
    def client_security(self) -> ClientSecurity:
        return client_security(self.quorum_auth, self.config.tls)

    @property
    def quorum_sasl(self) -> SaslServerConfig | None:
        """The listeners' SASL of the application's nodes (None: no authentication)."""
        return self.quorum_auth.sasl if self.quorum_auth is not None else None

    def _static_voters(self) -> int:
        """The first start's --voters (the static voter set), kept in the data directory; a
        different --voters later is reached by KIP-853 changes (driver/voter_reconcile.py)."""
        path = os.path.join(self.config.data_dir, "initial-voters")
        try:
            with open(path, encoding="utf-8") as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            pass
        atomic_write(RealFileSystem(), path, f"{self.config.voters}\n".encode())
        return self.config.voters

    def _reconcile_voters(self, tasks: dict[int, Any]) -> None:
        try:
            self._reconcile_to(tasks, self.target_voters)
        except Exception:  # never takes the application down; retried next generation
            log.exception("voter reconcile failed")

    def _reconcile_to(self, tasks: dict[int, Any], target: int) -> None:
        """KIP-853 changes until the voters are the tasks ``0..target-1`` (one at a time)."""
        from driver.voter_reconcile import reconcile
        from kraft_spark.client import QuorumClient

        with self._reconcile_lock:
            boot = [f"{h['host']}:{h['port']}" for h in tasks.values()]
            client = QuorumClient(boot, retry_budget_s=30.0,
                                  **self.client_security.client_kwargs())
            try:
                reconcile(client, tasks, target, stopping=self.stopping, say=progress)
            finally:
                client.close()

    def resize(self, voters: int) -> dict[str, Any]:
        """A live change of the voter count (HTTP ``POST /v1/app/voters``): shrinking removes
        the voters beyond ``voters`` first (KIP-853 changes, while every task runs), then the
        voters stop gracefully and a new generation of ``voters`` tasks starts; growing starts
        the new generation at once and its new tasks are added once caught up. Returns at
        once; ``GET /v1/quorum`` shows the change as it happens."""
        if not 1 <= voters <= MAX_LIVE_VOTERS:
            raise ValueError(f"voters must be from 1 to {MAX_LIVE_VOTERS}, got {voters}")
        before = self.target_voters
        if voters == before:
            return {"voters": voters, "from": before, "change": "none"}
        threading.Thread(target=self._apply_resize, args=(voters,), daemon=True,
                         name="resize").start()
        return {"voters": voters, "from": before, "change": "started"}

    def _apply_resize(self, voters: int) -> None:
        assert self.control is not None
        progress(f"voters: resizing {self.target_voters} -> {voters}")
        if voters < self.target_voters:
            self._reconcile_to(dict(self._tasks), voters)
        self.target_voters = voters
        self._resizing.set()
        self.control.stop_voters()  # graceful: the leader resigns; the stage returns

    def _known_directory_ids(self) -> dict[int, str]:
        path = os.path.join(self.config.data_dir, "voter-directories.json")
        try:
            with open(path, encoding="utf-8") as fh:
                return {int(k): str(v) for k, v in json.load(fh).items()}
        except (OSError, ValueError):
            return {}

    def _save_directory_ids(self, voters: dict[int, Any]) -> None:
        path = os.path.join(self.config.data_dir, "voter-directories.json")
        ids = self._known_directory_ids()
        ids.update({v: h["directory_id"] for v, h in voters.items()})
        atomic_write(RealFileSystem(), path,
                     json.dumps({str(k): v for k, v in ids.items()}).encode())
