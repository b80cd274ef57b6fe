"""The default authentication of a quorum's Kafka-protocol listeners: SASL/PLAIN with
credentials made on a first start and kept in the data directory, as ``kraft-spark local`` and
the Spark application run their nodes.

* ``DATA_DIR/quorum-users`` (mode 0600): the users file every node reads
  (``kraft.sasl.plain.users.file``): ``admin <password>``. The nodes authenticate to each
  other as ``admin``, and ``super.users=User:admin`` may change the voters.
* ``DATA_DIR/admin.properties`` (mode 0600): the same identity as a Kafka client properties
  file, for ``kraft-spark metadata-quorum --command-config`` and Kafka's own tools.

A process that cannot read these files cannot fetch, vote, or change the voters: the
listeners refuse every request before authentication (``net.sasl_server``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kraft_spark.client.security import admin_properties
from kraft_spark.net.cluster_acl import ClusterAcl
from kraft_spark.protocol.sasl_plain import ADMIN_USER, PlainUsers, SaslServerConfig
from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError, new_token, write_secret
from kraft_spark.tls_config import TlsConfig

USERS_FILE = "quorum-users"
ADMIN_PROPERTIES = "admin.properties"
SUPER_USERS = f"User:{ADMIN_USER}"


@dataclass(frozen=True)
class QuorumAuth:
    """Where the quorum's credentials are, and what they hold."""

    users_file: str
    admin_properties: str
    sasl: SaslServerConfig
    created: bool

    def node_properties(self) -> list[str]:
        """The lines a node's properties file needs to use them."""
        return [f"kraft.sasl.plain.users.file={self.users_file}",
                f"kraft.sasl.plain.username={ADMIN_USER}", f"super.users={SUPER_USERS}"]


def listener_fields(sasl: SaslServerConfig | None,
                    tls: TlsConfig | None = None) -> dict[str, Any]:
    """The ``NodeConfig`` fields of a node built in code (the Spark application's voters and
    observer) whose listener takes ``sasl`` with ``super.users=User:admin``, over mutual TLS
    when ``tls`` is given (SASL_SSL); none without either."""
    fields: dict[str, Any] = {"tls": tls} if tls is not None else {}
    if sasl is not None:
        fields |= {"sasl": sasl, "acl": ClusterAcl.configure(SUPER_USERS, tls=True)}
    return fields


def ensure_quorum_auth(data_dir: str, tls: TlsConfig | None = None) -> QuorumAuth:
    """The data directory's quorum credentials, made on a first start (and
    ``admin.properties`` written again from the users file on every start; with ``tls``, for
    SASL over mutual TLS with those files)."""
    users_file = os.path.join(data_dir, USERS_FILE)
    created = not os.path.exists(users_file)
    try:
        if created:
            write_secret(users_file, f"{ADMIN_USER} {new_token()}\n")
        users = PlainUsers.load(users_file)
        admin = users.credentials(ADMIN_USER, users_file)
        path = os.path.join(data_dir, ADMIN_PROPERTIES)
        write_secret(path, admin_properties(admin, tls))
    except (SecretFileError, OSError) as exc:
        raise ConfigError(f"the quorum's credentials: {exc}") from None
    return QuorumAuth(users_file, path, SaslServerConfig(users, admin), created)
