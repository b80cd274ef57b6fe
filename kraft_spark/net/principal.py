"""Who is on the other end of a Kafka-protocol connection, named as Kafka names it.

A TLS connection (the listener requires a client certificate: mutual TLS) is
``User:<subject DN>``, the DN in RFC 2253 order, most specific first
(``User:CN=admin,OU=ops,O=Example``), as Kafka's default principal builder writes it; a
plaintext connection is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import asyncio
from typing import Any

ANONYMOUS = "User:ANONYMOUS"

# OpenSSL's long attribute names (what ssl.getpeercert() gives) to RFC 2253's short ones.
_SHORT = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
    "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}


def _escape(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def dn_of(subject: Any) -> str:
    """RFC 2253 string of ``ssl.getpeercert()["subject"]`` (RDNs most specific first)."""
    rdns = []
    for rdn in reversed(subject or ()):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(str(v))}" for k, v in rdn))
    return ",".join(rdns)


def principal_of(transport: asyncio.BaseTransport) -> str:
    """The connection's principal (``ANONYMOUS`` without a verified client certificate)."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return ANONYMOUS
    cert = ssl_object.getpeercert()
    if not cert:  # the listener did not ask for one (never so with mutual TLS)
        return ANONYMOUS
    return f"User:{dn_of(cert.get('subject'))}"


def certificate_of(transport: asyncio.BaseTransport) -> bytes | None:
    """The DER bytes of the connection's verified client certificate, or None."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return der if der else None
