"""Quorum arithmetic, kept apart so it can be checked against a naive version."""

from __future__ import annotations

from collections.abc import Iterable


def majority(n_voters: int) -> int:
    """Smallest number of voters that forms a majority."""
    return n_voters // 2 + 1


def majority_offset(offsets: Iterable[int]) -> int:
    """The largest offset that a majority of the given voter offsets has reached.

    Sort descending, take index ⌊n/2⌋. With n = 3 that is the 2nd largest, with n = 5
    the 3rd: exactly ``majority(n)`` voters are at or beyond it.
    """
    ordered = sorted(offsets, reverse=True)
    return ordered[len(ordered) // 2]
