"""``RaftNode``'s requests to its peers: one pipelined ``Connection`` per voter, the commit
path's Fetch on the hand-written codecs (``fast_wire``), every other request on the generic
Kafka codec, and each answer (or failure) handed back to the core as a callback."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kraft_spark.log.errors import LogError
from kraft_spark.net.config import NodeConfig
from kraft_spark.net.reply_token import wall_ms
from kraft_spark.protocol import ApiKey, decode_response, encode_request
from kraft_spark.protocol.fast_wire import decode_fetch_reply, encode_fetch_request
from kraft_spark.protocol.wire import WireError, request_to_wire, response_from_wire
from kraft_spark.raft.core import RaftCore
from kraft_spark.raft.messages import EndQuorumEpochRequest, FetchRequest, Response
from kraft_spark.raft.ready import Outbound
from kraft_spark.transport import Connection, TransportError

log = logging.getLogger("kraft_spark.net.node")


class PeerRequests:
    """The node's connections to its peers and the requests of its core on them.

    ``voter_address``: where a voter listens (None: unknown, the request is dropped and the
    core retries on its schedule); ``core``: the node's core now (None before it started);
    ``stopping``: answers are ignored then; ``drain``: the node carries out what the core
    answered; ``fail``: a storage failure while the core takes an answer, fatal to the node."""

    def __init__(
        self,
        config: NodeConfig,
        node_id: int,
        *,
        voter_address: Callable[[int], tuple[str, int] | None],
        core: Callable[[], RaftCore | None],
        stopping: Callable[[], bool],
        drain: Callable[[], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        self.config = config
        self.node_id = node_id
        self._voter_address = voter_address
        self._core_now = core
        self._stopping = stopping
        self._drain = drain
        self._fail = fail
        self._peers: dict[int, Connection] = {}
        self.resigning = 0  # EndQuorumEpoch requests in flight (a graceful stop waits)

    def connected(self, node_id: int) -> bool:
        conn = self._peers.get(node_id)
        return conn is not None and conn.connected

    async def close(self) -> None:
        for conn in self._peers.values():
            await conn.close()

    def _peer(self, node_id: int) -> Connection | None:
        conn = self._peers.get(node_id)
        if conn is None:
            endpoint = self._voter_address(node_id)
            if endpoint is None:
                return None
            conn = Connection(
                endpoint[0],
                endpoint[1],
                ssl_context=self.config.client_ssl(),
                sasl=self.config.client_sasl,
                client_id=f"raft-node-{self.node_id}",
                max_frame_bytes=self.config.max_frame_bytes,
                reconnect_backoff_s=self.config.quorum.retry_backoff_ms / 1000,
                # The core retries on its own schedule; it should hear of a refusal at once.
                fail_fast_when_refused=True,
            )
            self._peers[node_id] = conn
        return conn

    def send(self, out: Outbound) -> None:
        """Send one request of the core; its answer (or failure) comes back to
        ``_on_response`` as a callback, with no task in between."""
        conn = self._peer(out.dest)
        if conn is None:
            return
        message = out.message
        encode: Callable[[int, str], bytes]
        decode: Callable[[bytes], Response]
        if type(message) is FetchRequest:
            # The commit path: hand-written codecs (the generic ones when the bytes are unusual).
            api_key = int(ApiKey.FETCH)

            def encode(corr: int, client_id: str) -> bytes:
                return encode_fetch_request(message, corr, client_id)

            decode = decode_fetch_reply
        else:
            api_key, version, body = request_to_wire(message)

            def encode(corr: int, client_id: str) -> bytes:
                return encode_request(api_key, version, corr, client_id, body)

            def decode(payload: bytes) -> Response:
                return response_from_wire(api_key, decode_response(api_key, version, payload)[1])

        conn.start_request(
            api_key,
            encode,
            decode,
            self.config.quorum.request_timeout_ms / 1000,
            lambda response, error: self._on_response(out, response, error),
        )
        # Counted once it is sent (start_request raised nothing): its callback will come.
        if type(message) is EndQuorumEpochRequest:
            self.resigning += 1

    def _on_response(
        self, out: Outbound, response: Response | None, error: BaseException | None
    ) -> None:
        if type(out.message) is EndQuorumEpochRequest:
            self.resigning -= 1
        core = self._core_now()
        if self._stopping() or core is None:
            return
        if error is not None:
            if not isinstance(error, TransportError | WireError):
                log.error("node %d: request to %d failed unexpectedly: %r", self.node_id,
                          out.dest, error)
            # This request will never be answered; the core decides what to do about it (retry
            # a Fetch soon; a refused connection means the peer's process is gone).
            refused = isinstance(error, TransportError) and error.refused
            log.debug("node %d: request to %d failed%s: %s", self.node_id, out.dest,
                      " (refused)" if refused else "", error)
            core.on_request_failed(wall_ms(), out.request_id, refused=refused)
            self._drain()
            return
        assert response is not None
        try:  # a follower appends what it fetched: a full or failing disk shows up here
            core.handle_response(wall_ms(), out.dest, out.request_id, response)
        except (LogError, OSError) as exc:
            self._fail(exc)
            return
        self._drain()


__all__ = ["PeerRequests"]
