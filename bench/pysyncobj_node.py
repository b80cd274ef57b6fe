"""One PySyncObj node with a journal file and a small HTTP front, for the comparison bench.

    python -m bench.pysyncobj_node RAFT_ADDR HTTP_PORT DATA_DIR PARTNER_ADDR...

PySyncObj is a library, not a server, so this gives it the same shape as the other systems: a
replicated key-value map (``put`` and ``put_many`` are ``@replicated`` and called with
``sync=True``, so the HTTP answer comes after the commit) behind a threaded HTTP/1.1 server:

* ``POST /put``   ``{"key": ..., "value": ...}``
* ``POST /batch`` ``{"records": [{"key": ..., "value": ...}, ...]}`` (one replicated command)
* ``GET /status`` ``{"self": ..., "leader": ..., "term": ...}``

PySyncObj's ``FileJournal`` writes entries into an mmap'ed file and never fsyncs them, so an
acknowledged write can be lost on power failure; its numbers are not durable numbers.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, SyncObjException, replicated

COMMIT_TIMEOUT_S = 10.0


class ReplicatedMap(SyncObj):  # type: ignore[misc]
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self._data: dict[str, str] = {}

    @replicated  # type: ignore[untyped-decorator]
    def put(self, key: str, value: str) -> int:
        self._data[key] = value
        return len(self._data)

    @replicated  # type: ignore[untyped-decorator]
    def put_many(self, pairs: list[tuple[str, str]]) -> int:
        for key, value in pairs:
            self._data[key] = value
        return len(self._data)


def _handler(node: ReplicatedMap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/status":
                self._answer(404, {"error": "unknown path"})
                return
            status = node.getStatus()
            leader = status.get("leader")
            self._answer(200, {"self": str(status["self"]),
                               "leader": None if leader is None else str(leader),
                               "term": status["raft_term"]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length))
                if self.path == "/put":
                    node.put(str(body["key"]), str(body["value"]), sync=True,
                             timeout=COMMIT_TIMEOUT_S)
                elif self.path == "/batch":
                    pairs = [(str(r["key"]), str(r["value"])) for r in body["records"]]
                    node.put_many(pairs, sync=True, timeout=COMMIT_TIMEOUT_S)
                else:
                    self._answer(404, {"error": "unknown path"})
                    return
            except (ValueError, KeyError, TypeError) as exc:
                self._answer(400, {"error": f"bad request: {exc}"})
                return
            except SyncObjException as exc:
                self._answer(503, {"error": f"not committed: {exc.errorCode}"})
                return
            self._answer(200, {"ok": True, "term": node.raftCurrentTerm})

    return Handler


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    raft_addr, http_port, data_dir, *partners = argv
    os.makedirs(data_dir, exist_ok=True)
    conf = SyncObjConf(
        journalFile=os.path.join(data_dir, "journal.bin"),
        fullDumpFile=os.path.join(data_dir, "dump.bin"),
        dynamicMembershipChange=False,
    )
    node = ReplicatedMap(raft_addr, partners, conf)
    server = ThreadingHTTPServer(("127.0.0.1", int(http_port)), _handler(node))
    server.daemon_threads = True
    print(json.dumps({"raft": raft_addr, "http": f"http://127.0.0.1:{http_port}"}), flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        node.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
