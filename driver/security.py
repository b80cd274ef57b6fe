"""The application's start-up security decisions, made before anything listens: the HTTP API's
credentials, and whether its voters may listen in plaintext beyond this host."""

from __future__ import annotations

import os

from driver.config import AppConfig
from driver.console import progress
from kraft_spark.client.security import ClientSecurity
from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, server_credentials
from kraft_spark.quorum_auth import QuorumAuth, ensure_quorum_auth
from kraft_spark.raft.config import ConfigError
from kraft_spark.spark_session import LOCAL_MASTER
from kraft_spark.tls_config import TlsConfig


def http_credentials(cfg: AppConfig) -> tuple[str | None, Credentials | None]:
    """The operator's credentials (kraft.http.credentials.file / kraft.http.token), else
    those kept in the data directory, created on a first start; none with
    kraft.http.insecure=true (said loudly). Returns the file (None for a token) and them."""
    path, credentials, created = server_credentials(
        path=cfg.http_credentials_file, token=cfg.http_token, insecure=cfg.http_insecure,
        default_path=os.path.join(cfg.data_dir, CREDENTIALS_FILE))
    if credentials is None:
        progress("kraft.http.insecure=true: the HTTP API takes every call without "
                 "credentials; anyone who reaches it can append and change the voters")
    elif created:
        progress(f"HTTP credentials (admin, write and read tokens) created in {path}")
    return path, credentials


def quorum_auth(cfg: AppConfig) -> QuorumAuth | None:
    """The listeners' SASL/PLAIN credentials in the data directory (made on a first start);
    None with kraft.listener.insecure=true (said loudly)."""
    if cfg.listener_insecure:
        if cfg.tls is not None:
            raise ConfigError("kraft.listener.insecure=true with TLS (ssl.*.location): the "
                              "voters' listeners would authenticate certificates but name no "
                              "administrator; keep SASL on (remove kraft.listener.insecure)")
        progress("kraft.listener.insecure=true: the voters' Kafka-protocol listeners take every "
                 "request without authentication; anyone who reaches them can read the log and "
                 "change the voters")
        return None
    auth = ensure_quorum_auth(cfg.data_dir, cfg.tls)
    if auth.created:
        progress(f"quorum credentials (SASL/PLAIN) created in {auth.users_file}")
    return auth


def client_security(auth: QuorumAuth | None, tls: TlsConfig | None) -> ClientSecurity:
    """How the driver's clients (sidecar, observer, voter changes) authenticate: as the
    administrator, since they also carry voter changes (over mutual TLS with ``tls``)."""
    return ClientSecurity(tls.client_context() if tls is not None else None,
                          auth.sasl.client if auth is not None else None)


def check_voter_listeners(master: str, cfg: AppConfig) -> None:
    """With any master but ``local[N]`` the voters listen on every interface of their hosts,
    in plaintext: refused unless kraft.listener.plaintext.allowed=true."""
    if LOCAL_MASTER.fullmatch(master) or cfg.listener_plaintext_allowed or cfg.tls:
        return
    raise ConfigError(
        f"with master {master} the voters' Kafka-protocol listeners (plaintext) would listen "
        "on every interface of their hosts, where anyone who reaches them could vote, read "
        "the log and change the voters: set kraft.listener.plaintext.allowed=true to run on "
        "a network you trust")
