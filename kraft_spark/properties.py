"""Java-style properties files (Kafka's ``server.properties``, ``--command-config``) and the
values they hold: ``host:port`` endpoints and ``controller.quorum.voters`` lists."""

from __future__ import annotations

from kraft_spark.raft.config import ConfigError


def load_properties(path: str) -> dict[str, str]:
    """Parse a Java-style properties file (``key=value``, ``key: value``, ``#``/``!`` comments)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc.strerror}") from exc
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        eq, colon = line.find("="), line.find(":")
        cut = min(i for i in (eq, colon, len(line)) if i >= 0)
        props[line[:cut].strip()] = line[cut + 1 :].strip()
    return props


def parse_endpoint(text: str, what: str) -> tuple[str, int]:
    """``host:port`` (an optional ``NAME://`` prefix is dropped; IPv6 in brackets)."""
    value = text.split("://", 1)[-1].strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what}: expected host:port, got {text!r}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{what}: port must be a number, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{what}: port {number} out of range")
    return host.strip("[]"), number


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters``: ``id@host:port,...`` → {id: (host, port)}."""
    voters: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        ident, sep, endpoint = item.partition("@")
        if not sep:
            raise ConfigError(
                f"controller.quorum.voters: expected id@host:port, got {item!r}"
            )
        try:
            node = int(ident)
        except ValueError:
            raise ConfigError(f"controller.quorum.voters: bad id in {item!r}") from None
        if node in voters:
            raise ConfigError(f"controller.quorum.voters: voter {node} listed twice")
        voters[node] = parse_endpoint(endpoint, "controller.quorum.voters")
    if not voters:
        raise ConfigError("controller.quorum.voters is empty: list the voters as id@host:port")
    return voters
