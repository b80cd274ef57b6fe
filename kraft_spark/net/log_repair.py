"""Repairing a log whose sealed segment is damaged (bit rot, a flipped byte, a zeroed range).

Recovery at start-up validates every batch of the last segment but trusts a sealed segment
whose index checks out, so damage in the middle of one is found when a batch is read: while
the state and the producer table are rebuilt at start-up, or while serving a Fetch. Then:

* the damaged segment file is copied aside as ``<segment>.log.corrupt-<ms>`` for inspection;
* the log is truncated at the damaged batch: it and everything after it go, and the node
  fetches them again from the leader;
* the node does not vote until it has caught up (the disk-loss rule, persisted in its
  quorum-state), since the records it dropped may have been committed with its vote;
* and it takes a new ``directory.id`` (KIP-853: a log that lost records is another replica).
  With static voters (directory ids unknown) that changes nothing; with dynamic ones the node
  is not the voter it was until it has been removed and added again (the Spark driver does
  that once it has caught up; by hand: ``metadata-quorum remove-controller`` then
  ``add-controller``).

Found at start-up, the repair happens there and the node starts. Found while running, the node
notes the damage in ``damaged-offset`` in the partition directory and stops (exit 74, see
``storage_failure``); its supervisor restarts it, and the start-up applies the note.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kraft_spark.log.checkpoints import atomic_write
from kraft_spark.log.errors import CorruptSegmentError
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.meta import (
    META_PROPERTIES_FILE,
    MetaProperties,
    new_directory_id,
    read_meta_properties,
)
from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.net.state_keeper import Storage

log = logging.getLogger(__name__)

DAMAGE_NOTE = "damaged-offset"
# Start-up attempts that may each find (and cut at) one more damaged batch.
REPAIR_ATTEMPTS = 4


def note_damage(damage: CorruptSegmentError) -> None:
    """Best effort: record where the damage is for the next start (``<offset> <position>
    <segment path>``). A failure to write the note only costs finding the damage again."""
    note = os.path.join(os.path.dirname(damage.path), DAMAGE_NOTE)
    try:
        with open(note, "w", encoding="utf-8") as fh:
            fh.write(f"{damage.offset} {damage.position} {damage.path}\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        log.warning("%s: could not note the damage at offset %d: %s", note, damage.offset, exc)


def noted_damage(partition_dir: str) -> CorruptSegmentError | None:
    """The damage an earlier run noted, if any."""
    note = os.path.join(partition_dir, DAMAGE_NOTE)
    try:
        with open(note, encoding="utf-8") as fh:
            offset, position, path = fh.read().split(maxsplit=2)
        return CorruptSegmentError(path.strip(), int(position), int(offset),
                                   "noted by the previous run")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); ignoring it", note, exc)
        os.remove(note)
        return None


def cut_at_damage(the_log: SegmentedLog, damage: CorruptSegmentError, node_id: int) -> None:
    """Blocking: set the damaged segment aside and truncate the log at the damaged batch."""
    aside = f"{damage.path}.corrupt-{int(time.time() * 1000)}"
    if os.path.exists(damage.path):
        shutil.copyfile(damage.path, aside)
    end = the_log.end_offset()
    if damage.offset < end:
        the_log.truncate_to(damage.offset)
    directory = renew_directory(os.path.dirname(the_log.partition_dir))
    if directory is not None and the_log.meta is not None:
        the_log.meta = directory
    note = os.path.join(the_log.partition_dir, DAMAGE_NOTE)
    if os.path.exists(note):
        os.remove(note)
    log.error(
        "node %d: damaged batch in %s at position %d (offset %d): %s; the segment is kept as "
        "%s and the log is cut at offset %d (it ended at %d): the node fetches the rest from "
        "the leader and does not vote until it has caught up",
        node_id, damage.path, damage.position, damage.offset, damage, aside,
        the_log.end_offset(), end)


def renew_directory(log_dir: str) -> MetaProperties | None:
    """Blocking: give ``meta.properties`` a new directory id, durably (None: the directory
    has no meta.properties, as in tests of the bare log)."""
    meta = read_meta_properties(log_dir)
    if meta is None:
        return None
    renewed = dataclasses.replace(meta, directory_id=new_directory_id())
    atomic_write(RealFileSystem(), os.path.join(log_dir, META_PROPERTIES_FILE), renewed.to_bytes())
    log.warning("%s: directory.id %s -> %s (the log was cut: this is another replica now)",
                log_dir, meta.directory_id, renewed.directory_id)
    return renewed


async def open_with_repair(
    run: Callable[[Callable[[], Any]], Awaitable[Any]],
    open_storage: Callable[[], Storage],
    build: Callable[[Storage, bool], None],
    node_id: int,
) -> None:
    """Open the storage (``run`` runs a blocking call off the loop) and ``build(storage,
    repaired)`` the node's state from it; where a damaged batch turns up, cut the log there and
    start again (``repaired`` is then True: the node must catch up before it votes)."""
    repaired = False
    for attempt in range(REPAIR_ATTEMPTS):
        storage: Storage = await run(open_storage)
        damage: CorruptSegmentError | None = None
        try:
            damage = noted_damage(storage.log.partition_dir)
            if damage is None:
                build(storage, repaired)
                return
        except CorruptSegmentError as found:
            damage = found
        except BaseException:
            storage.log.close()  # a refusal (a damaged quorum-state): release the directory
            raise
        if attempt == REPAIR_ATTEMPTS - 1:
            storage.log.close()
            raise damage

        def cut(damage: CorruptSegmentError = damage, storage: Storage = storage) -> None:
            cut_at_damage(storage.log, damage, node_id)

        try:
            await run(cut)
        finally:
            storage.log.close()
        repaired = True
