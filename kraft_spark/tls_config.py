"""TLS settings (Kafka's PEM keys: ``ssl.certificate.location``, ``ssl.key.location``,
``ssl.ca.location``) and the SSL contexts of both ends: mutual TLS, trust from a private CA."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError, check_private


@dataclass(frozen=True)
class TlsConfig:
    certfile: str
    keyfile: str
    cafile: str

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.cafile)
        ctx.load_cert_chain(self.certfile, self.keyfile)
        ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: no certificate, no connection
        return ctx

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        ctx.load_cert_chain(self.certfile, self.keyfile)
        # Nodes are addressed by IP in most deployments; trust is the private CA's signature.
        ctx.check_hostname = False
        return ctx

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TlsConfig | None:
        keys = ("ssl.certificate.location", "ssl.key.location", "ssl.ca.location")
        present = [k for k in keys if props.get(k)]
        if not present:
            return None
        if len(present) != len(keys):
            missing = ", ".join(k for k in keys if k not in present)
            raise ConfigError(f"TLS needs all of {', '.join(keys)}; missing {missing}")
        for key in keys:
            if not os.path.isfile(props[key]):
                raise ConfigError(f"{key}: no such file {props[key]}")
        try:
            check_private(props["ssl.key.location"])  # a key others can read is theirs too
        except SecretFileError as exc:
            raise ConfigError(f"ssl.key.location: {exc}") from None
        return cls(*(props[k] for k in keys))
