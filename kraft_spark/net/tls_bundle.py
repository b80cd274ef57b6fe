"""A node's TLS files carried to where it runs: the Spark application reads its certificate,
key and CA (PEM) on the driver and ships their text to the executors inside the voter task (as
it ships the HTTP and SASL credentials), where each voter writes them owner-only beside its log
and listens with mutual TLS.

The key never appears in a repr; the files are written with ``secret_files.write_secret``
(mode 0600, atomically: voters of one host write the same content to the same place)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kraft_spark.raft.config import ConfigError
from kraft_spark.secret_files import SecretFileError, check_private, write_secret
from kraft_spark.tls_config import TlsConfig


@dataclass(frozen=True)
class TlsBundle:
    certificate: str
    key: str = field(repr=False)
    ca: str

    @classmethod
    def read(cls, tls: TlsConfig) -> TlsBundle:
        """The PEM text of ``tls``'s files; the key file must be private to its owner."""
        try:
            check_private(tls.keyfile)
            texts = []
            for path in (tls.certfile, tls.keyfile, tls.cafile):
                with open(path, encoding="ascii") as fh:
                    texts.append(fh.read())
        except (OSError, UnicodeError, SecretFileError) as exc:
            raise ConfigError(f"TLS files: {exc}") from None
        return cls(*texts)

    def install(self, directory: str) -> TlsConfig:
        """Write the files under ``directory`` (owner-only) and return their configuration."""
        paths = [os.path.join(directory, name) for name in ("node.pem", "node.key", "ca.pem")]
        for path, text in zip(paths, (self.certificate, self.key, self.ca), strict=True):
            write_secret(path, text)
        return TlsConfig(*paths)
