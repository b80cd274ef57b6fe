"""The voter set of KIP-853: who votes, which copy of their disk, and how to reach them.

A voter is the pair (node id, directory id): the directory id is the ``directory.id`` of the
voter's ``meta.properties``, so a node that comes back with a wiped disk (a new directory id) is
not the voter it was until it has been removed and added again. ``NIL_DIRECTORY`` stands for a
voter whose directory id is unknown (a quorum started from a static ``controller.quorum.voters``
list, Kafka's kraft.version 0): it matches any directory of that id.

Values only; the history of voter sets along the log is in ``voter_history``.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

NIL_DIRECTORY = uuid.UUID(int=0)
# Kafka's kraft.version feature: 0 = static voters, 1 = voters in VotersRecords (KIP-853).
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
# The listener name our voters' Raft port goes by in VotersRecords (Kafka's
# controller.listener.names default in its examples).
DEFAULT_LISTENER = "CONTROLLER"


def directory_text(directory_id: uuid.UUID) -> str:
    """Kafka's text form of a directory id: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(directory_id.bytes).rstrip(b"=").decode("ascii")


def parse_directory(text: str) -> uuid.UUID:
    """The inverse of ``directory_text``; also accepts the canonical hyphenated form. Raises
    ValueError naming the expected form."""
    text = text.strip()
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except (ValueError, TypeError):
        raise ValueError(
            f"invalid directory id {text!r}: expected Kafka's 22-character base64 form "
            "(the directory.id of meta.properties)"
        ) from None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a voter (VotersRecord's Endpoint: name, host, uint16 port)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    directory_id: uuid.UUID = NIL_DIRECTORY
    endpoints: tuple[Endpoint, ...] = ()

    def matches(self, node_id: int, directory_id: uuid.UUID) -> bool:
        """True when (node_id, directory_id) is this voter: the same id, and the same directory
        unless either side does not know it (NIL)."""
        return node_id == self.node_id and (
            NIL_DIRECTORY in (self.directory_id, directory_id)
            or directory_id == self.directory_id
        )

    def address(self) -> tuple[str, int] | None:
        """Where to reach its Raft listener (the first endpoint)."""
        if not self.endpoints:
            return None
        return self.endpoints[0].host, self.endpoints[0].port

    def describe(self) -> str:
        ends = ", ".join(str(e) for e in self.endpoints)
        return f"{self.node_id}@{directory_text(self.directory_id)}" + (
            f" [{ends}]" if ends else "")


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Voters sorted by node id; invariant: ids are unique and the set is never empty."""

    voters: tuple[Voter, ...]

    def __post_init__(self) -> None:
        ids = [v.node_id for v in self.voters]
        if not ids:
            raise ValueError("a voter set may not be empty")
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate voter ids in {ids}")
        if ids != sorted(ids):
            object.__setattr__(self, "voters", tuple(sorted(self.voters, key=lambda v: v.node_id)))

    @classmethod
    def of_ids(cls, ids: Iterable[int]) -> VoterSet:
        """A static voter set: ids only (directories unknown, endpoints from configuration)."""
        return cls(tuple(Voter(i) for i in sorted(set(ids))))

    def ids(self) -> tuple[int, ...]:
        return tuple(v.node_id for v in self.voters)

    def get(self, node_id: int) -> Voter | None:
        for voter in self.voters:
            if voter.node_id == node_id:
                return voter
        return None

    def contains(self, node_id: int, directory_id: uuid.UUID) -> bool:
        voter = self.get(node_id)
        return voter is not None and voter.matches(node_id, directory_id)

    def with_voter(self, voter: Voter) -> VoterSet:
        """This set plus ``voter`` (replacing a voter of the same id)."""
        return VoterSet((*(v for v in self.voters if v.node_id != voter.node_id), voter))

    def without(self, node_id: int) -> VoterSet:
        """This set minus ``node_id``; ValueError if that would leave it empty."""
        return VoterSet(tuple(v for v in self.voters if v.node_id != node_id))

    def with_directories(self, known: dict[int, uuid.UUID]) -> VoterSet:
        """Fill in unknown directory ids from ``known`` (what the leader saw voters fetch with)."""
        return VoterSet(tuple(
            Voter(v.node_id, known.get(v.node_id, v.directory_id), v.endpoints)
            if v.directory_id == NIL_DIRECTORY else v
            for v in self.voters
        ))

    def with_endpoints(self, known: dict[int, tuple[str, int]]) -> VoterSet:
        """Fill in missing endpoints from ``known`` (the static configuration)."""
        return VoterSet(tuple(
            Voter(v.node_id, v.directory_id, (Endpoint(DEFAULT_LISTENER, *known[v.node_id]),))
            if not v.endpoints and v.node_id in known else v
            for v in self.voters
        ))

    def with_addresses(self, known: dict[int, tuple[str, int]]) -> VoterSet:
        """The first endpoint of each voter in ``known`` moved to that address (where the
        node listens now; a VotersRecord holds where it listened when it was written)."""
        def moved(v: Voter) -> Voter:
            if v.node_id not in known:
                return v
            name = v.endpoints[0].name if v.endpoints else DEFAULT_LISTENER
            return Voter(v.node_id, v.directory_id,
                         (Endpoint(name, *known[v.node_id]), *v.endpoints[1:]))
        return VoterSet(tuple(moved(v) for v in self.voters))

    def describe(self) -> str:
        return "[" + ", ".join(v.describe() for v in self.voters) + "]"
