"""How a client authenticates to the quorum's Kafka-protocol listeners, read from a client
properties file with Kafka's names (the file Kafka's tools take as ``--command-config``):

* ``security.protocol``: ``PLAINTEXT`` (default), ``SASL_PLAINTEXT``, ``SSL`` or ``SASL_SSL``;
* ``sasl.mechanism=PLAIN`` and ``sasl.jaas.config=org.apache.kafka.common.security.plain.
  PlainLoginModule required username="..." password="...";`` for the SASL protocols;
* TLS: ``ssl.truststore.location`` / ``ssl.keystore.location`` with ``ssl.*.type=PEM`` (the
  keystore file holds the key and its certificate), or the node's own
  ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.ca.location``.

A node's own properties file works too (``kraft-spark metadata-quorum add-controller
--command-config node.properties``, as with Kafka's tool): without ``security.protocol``, the
node's ``kraft.sasl.plain.users.file`` and ``kraft.sasl.plain.username`` say who it is.

A file that holds a password must be private to its owner (``secret_files``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraft_spark.properties import load_properties
from kraft_spark.protocol import ErrorCode
from kraft_spark.protocol.sasl_plain import MECHANISM, PlainCredentials, SaslServerConfig
from kraft_spark.protocol.wire import first_partition
from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError, check_private
from kraft_spark.tls_config import TlsConfig

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """The TLS context and SASL identity of a client's connections (both None: plaintext)."""

    ssl_context: ssl.SSLContext | None = None
    sasl: PlainCredentials | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``AsyncQuorumClient`` / ``QuorumClient``."""
        return {"ssl_context": self.ssl_context, "sasl": self.sasl}

    @classmethod
    def from_file(cls, path: str) -> ClientSecurity:
        props = load_properties(path)
        security = cls.from_properties(props, path)
        if security.sasl is not None and "sasl.jaas.config" in props:
            try:
                check_private(path)  # it holds a password
            except SecretFileError as exc:
                raise ConfigError(str(exc)) from None
        return security

    @classmethod
    def from_properties(cls, props: Mapping[str, str], source: str) -> ClientSecurity:
        protocol = props.get("security.protocol", "").strip().upper()
        if not protocol:
            return _node_identity(props)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{source}: security.protocol={protocol} is not one of "
                              f"{', '.join(PROTOCOLS)}")
        sasl = _plain_login(props, source) if protocol.startswith("SASL_") else None
        context = _tls_context(props, source) if protocol.endswith("SSL") else None
        return cls(context, sasl)


def _plain_login(props: Mapping[str, str], source: str) -> PlainCredentials:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()  # Kafka's default
    if mechanism != MECHANISM:
        raise ConfigError(f"{source}: sasl.mechanism={mechanism}: the quorum's listeners take "
                          f"{MECHANISM} only; set sasl.mechanism={MECHANISM}")
    jaas = props.get("sasl.jaas.config", "").strip()
    if not jaas.startswith(PLAIN_LOGIN_MODULE):
        raise ConfigError(f"{source}: sasl.jaas.config must be '{PLAIN_LOGIN_MODULE} required "
                          'username="..." password="...";\'')
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
    if not options.get("username") or "password" not in options:
        raise ConfigError(f"{source}: sasl.jaas.config names no username and password")
    return PlainCredentials(options["username"], options["password"])


def _tls_context(props: Mapping[str, str], source: str) -> ssl.SSLContext:
    node_style = TlsConfig.from_properties(props)
    if node_style is not None:
        return node_style.client_context()
    for kind in ("truststore", "keystore"):
        store_type = props.get(f"ssl.{kind}.type", "").strip().upper()
        if props.get(f"ssl.{kind}.location") and store_type != "PEM":
            raise ConfigError(f"{source}: ssl.{kind}.type={store_type or 'JKS'}: only PEM "
                              f"files are read here; set ssl.{kind}.type=PEM")
    truststore = props.get("ssl.truststore.location", "").strip()
    if not truststore:
        raise ConfigError(f"{source}: SSL needs ssl.truststore.location (the quorum's CA, PEM)")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=truststore)
    context.check_hostname = False  # nodes are addressed by IP; trust is the CA's signature
    keystore = props.get("ssl.keystore.location", "").strip()
    if keystore:
        context.load_cert_chain(keystore)
    return context


def _node_identity(props: Mapping[str, str]) -> ClientSecurity:
    """A node's properties file: the identity the node itself uses toward its peers."""
    sasl = SaslServerConfig.from_properties(props)
    tls = TlsConfig.from_properties(props)
    return ClientSecurity(tls.client_context() if tls is not None else None,
                          sasl.client if sasl is not None else None)


def admin_properties(credentials: PlainCredentials, tls: TlsConfig | None = None) -> str:
    """The text of a client properties file for ``credentials`` on a SASL_PLAINTEXT listener
    (SASL_SSL with ``tls``: the node-style PEM paths, which kraft-spark's commands read), for
    kraft-spark's commands and Kafka's tools alike (``--command-config``)."""
    password = credentials.password.replace("\\", "\\\\").replace('"', '\\"')
    text = ("# The quorum administrator's client settings (Kafka's names), for kraft-spark's\n"
            "# commands and Kafka's tools: --command-config FILE. Keep this file private.\n"
            f"security.protocol={'SASL_SSL' if tls is not None else 'SASL_PLAINTEXT'}\n"
            f"sasl.mechanism={MECHANISM}\n"
            f"sasl.jaas.config={PLAIN_LOGIN_MODULE} required "
            f'username="{credentials.username}" password="{password}";\n')
    if tls is not None:
        text += (f"ssl.certificate.location={tls.certfile}\nssl.key.location={tls.keyfile}\n"
                 f"ssl.ca.location={tls.cafile}\n")
    return text


def needs_authentication(reply: Mapping[str, Any]) -> bool:
    """True when a response says its listener takes no request before SASL authentication
    (ILLEGAL_SASL_STATE: ``net.sasl_server`` answers so, then closes the connection)."""
    if reply.get("error_code") == ErrorCode.ILLEGAL_SASL_STATE:
        return True
    part = first_partition(dict(reply), "responses", "partition_responses")  # Produce's
    return part is not None and part.get("error_code") == ErrorCode.ILLEGAL_SASL_STATE
