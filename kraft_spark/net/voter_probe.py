"""Before the leader adds a voter (AddRaftVoter), it asks the new voter's listener for its
ApiVersions, as Kafka's AddVoterHandler does: the endpoint goes into the VotersRecord, where
every voter will look for that node, so an address the leader cannot reach, or a node that
cannot run kraft.version 1, is refused now (REQUEST_TIMED_OUT / INVALID_REQUEST, Kafka's codes)
instead of becoming a voter nobody can talk to.

The probe is the shell's (it does I/O); the core's own checks (the new voter fetches as an
observer with that directory id and is caught up) come after it.
"""

from __future__ import annotations

import ssl

from kraft_spark.protocol import ApiKey
from kraft_spark.protocol.sasl_plain import PlainCredentials
from kraft_spark.raft.messages import ErrorCode
from kraft_spark.raft.voter_set import KRAFT_VERSION_DYNAMIC
from kraft_spark.transport import Connection, TransportError

# ApiVersions v3 is flexible and carries SupportedFeatures (kraft.version among them).
PROBE_VERSION = 3
KRAFT_VERSION_FEATURE = "kraft.version"


async def probe_new_voter(
    host: str, port: int, timeout_s: float, ssl_context: ssl.SSLContext | None = None,
    sasl: PlainCredentials | None = None,
) -> tuple[ErrorCode, str] | None:
    """None when ``host:port`` answers ApiVersions and supports kraft.version 1 (or says
    nothing about features, as Kafka 3.x nodes may); else (error code, reason)."""
    conn = Connection(host, port, ssl_context=ssl_context, connect_timeout_s=timeout_s,
                      fail_fast_when_refused=True, sasl=sasl)
    try:
        body = await conn.request(ApiKey.API_VERSIONS, PROBE_VERSION,
                                  {"client_software_name": "kraft-spark",
                                   "client_software_version": "probe"}, timeout_s)
    except (TransportError, OSError, TimeoutError) as exc:
        return (ErrorCode.REQUEST_TIMED_OUT,
                f"the new voter's listener {host}:{port} did not answer ApiVersions ({exc}): "
                "start it (as an observer of this quorum) and give its reachable address")
    finally:
        await conn.close()
    if body.get("error_code", 0):
        return (ErrorCode.REQUEST_TIMED_OUT,
                f"the new voter at {host}:{port} answered ApiVersions with error "
                f"{body['error_code']}")
    for feature in body.get("supported_features") or ():
        if feature.get("name") == KRAFT_VERSION_FEATURE and not (
            feature["min_version"] <= KRAFT_VERSION_DYNAMIC <= feature["max_version"]
        ):
            return (ErrorCode.INVALID_REQUEST,
                    f"the new voter at {host}:{port} supports kraft.version "
                    f"{feature['min_version']}-{feature['max_version']}, not "
                    f"{KRAFT_VERSION_DYNAMIC}")
    return None
