"""Who may change the voters over the Kafka protocol: Kafka's ALTER on CLUSTER, granted here
as Kafka's ``super.users`` grants it.

* ``super.users`` (``User:CN=admin;User:CN=ops``, Kafka's syntax: principals separated by
  ``;``) names the principals (``net.principal``) allowed AddRaftVoter and RemoveRaftVoter.
* Enforced when ``super.users`` is set or the listener uses mutual TLS (certificates without
  a list of who may administer would authenticate everyone and authorize no one: voter changes
  are then refused, naming the setting). A plaintext listener with no ``super.users`` accepts
  them from anyone who reaches it, as Kafka does without an authorizer; such a listener must be
  on loopback unless ``kraft.listener.plaintext.allowed=true`` (``check_listener``).
* UpdateRaftVoter (a voter announcing its own endpoints) is a cluster action of the voters
  themselves: any connection that passed mutual TLS (its certificate is signed by the
  quorum's CA) may send it, and so may anyone on an unauthenticated listener.

A refusal is answered CLUSTER_AUTHORIZATION_FAILED with the principal and the setting that
would allow it; nothing is changed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kraft_spark.addresses import is_loopback
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.principal import ANONYMOUS
from kraft_spark.protocol import ApiKey, ErrorCode, RequestHeader
from kraft_spark.protocol.wire import error_response_body
from kraft_spark.raft.config import ConfigError

log = logging.getLogger("kraft_spark.net.cluster_acl")

PLAINTEXT_ALLOWED_KEY = "kraft.listener.plaintext.allowed"


@dataclass(frozen=True)
class ClusterAcl:
    super_users: frozenset[str] = frozenset()
    enforced: bool = False

    @classmethod
    def configure(cls, super_users: str | None, tls: bool) -> ClusterAcl:
        names = frozenset(p.strip() for p in (super_users or "").split(";") if p.strip())
        for name in names:
            if not name.startswith("User:") or name == "User:":
                raise ConfigError(f"super.users: {name!r} is not a principal (User:<name>, "
                                  "e.g. User:CN=admin)")
        return cls(names, enforced=bool(names) or tls)

    def may_alter_cluster(self, principal: str) -> bool:
        """AddRaftVoter, RemoveRaftVoter."""
        return not self.enforced or principal in self.super_users

    def may_act_as_voter(self, principal: str) -> bool:
        """UpdateRaftVoter: an authenticated peer, or anyone where nothing is authenticated."""
        return (not self.enforced or principal != ANONYMOUS
                or principal in self.super_users)

    def refusal(self, principal: str, api: str) -> str:
        if not self.super_users:
            return (f"{api} refused: {principal} is not allowed to change the voters (no "
                    "super.users configured on this listener; list the administrators' "
                    "principals there, e.g. super.users=User:CN=admin)")
        return (f"{api} refused: {principal} is not in super.users; connect with the "
                "certificate of a listed principal or add it to super.users")


def check_listener(host: str, tls: bool, plaintext_allowed: bool) -> None:
    """A plaintext Kafka-protocol listener beyond loopback is refused unless explicitly
    allowed: anyone who reaches it could vote, fetch the log and change the voters."""
    if tls or plaintext_allowed or is_loopback(host):
        return
    raise ConfigError(
        f"the Kafka-protocol listener would accept plaintext connections on {host or '*'}: "
        "configure mutual TLS (ssl.certificate.location, ssl.key.location, ssl.ca.location) "
        f"with super.users, bind it to 127.0.0.1, or set {PLAINTEXT_ALLOWED_KEY}=true on a "
        "network you trust")


def refusal_for(acl: ClusterAcl, principal: str, api_key: int) -> str | None:
    """Why ``principal`` may not send request ``api_key`` here (None: it may)."""
    if api_key in (ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER):
        if not acl.may_alter_cluster(principal):
            return acl.refusal(principal, ApiKey(api_key).name)
    elif api_key == ApiKey.UPDATE_RAFT_VOTER and not acl.may_act_as_voter(principal):
        return acl.refusal(principal, "UPDATE_RAFT_VOTER")
    return None


def refused_unauthorized(acl: ClusterAcl, conn: ServerConnection, header: RequestHeader,
                         node_id: int) -> bool:
    """Answer CLUSTER_AUTHORIZATION_FAILED (and log it) when ``conn`` may not send this
    request; True when it was refused."""
    refused = refusal_for(acl, conn.principal, header.api_key)
    if refused is None:
        return False
    log.warning("node %d: %s (from %s)", node_id, refused, conn.peer)
    conn.respond(header.api_key, header.api_version, header.correlation_id,
                 error_response_body(header.api_key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                     refused))
    return True
