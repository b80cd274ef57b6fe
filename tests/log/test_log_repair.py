"""Damage in a sealed segment: found on read with where it is, noted for the next start, and
cut away with the damaged segment kept aside (kraft_spark.net.log_repair)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_spark.log import SegmentedLog
from kraft_spark.log.errors import CorruptRecordError, CorruptSegmentError, LogError
from kraft_spark.log.fs import RealFileSystem
from kraft_spark.log.meta import format_log_dir, new_directory_id, read_meta_properties
from kraft_spark.net.log_repair import DAMAGE_NOTE, cut_at_damage, note_damage, noted_damage
from tests.log.helpers import fill

# Sealed segments of ~20 batches with an index entry every batch or two: recovery adopts a
# sealed segment whose last index entry and the batches after it check out, so damage near
# its start is only found when read (as on a real node with 64 MiB segments).
OPTIONS = {"segment_bytes": 4000, "index_interval_bytes": 200}


def damaged_log(tmp_path: Path) -> tuple[str, Path]:
    log_dir = str(tmp_path / "node")
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        fill(log, [1] * 60, value_size=50)
        log.flush()
        sealed = sorted(Path(log.partition_dir).glob("*.log"))[1]
    with open(sealed, "r+b") as fh:  # a byte of the first batch's records: its CRC fails
        fh.seek(70)
        byte = fh.read(1)
        fh.seek(70)
        fh.write(bytes([byte[0] ^ 0x01]))
    return log_dir, sealed


def test_a_read_names_the_file_position_and_offset_of_the_damage(tmp_path: Path) -> None:
    log_dir, sealed = damaged_log(tmp_path)
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        base = int(sealed.name.split(".")[0])
        assert log.end_offset() == 180  # recovery trusted the sealed segment's index
        with pytest.raises(CorruptSegmentError) as caught:
            log.read(0, 1 << 20)
        damage = caught.value
        # Both a CorruptRecordError (bad bytes) and a LogError (the node's storage failed).
        assert isinstance(damage, CorruptRecordError) and isinstance(damage, LogError)
        assert (damage.path, damage.position, damage.offset) == (str(sealed), 0, base)
        assert "CRC mismatch" in str(damage)


def test_the_damage_is_noted_cut_away_and_the_segment_kept_aside(tmp_path: Path) -> None:
    log_dir, sealed = damaged_log(tmp_path)
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        base = int(sealed.name.split(".")[0])
        with pytest.raises(CorruptSegmentError) as caught:
            log.read(base, 1 << 20)
        assert noted_damage(log.partition_dir) is None
        note_damage(caught.value)  # what a running node does before it stops
        noted = noted_damage(log.partition_dir)
        assert noted is not None and (noted.path, noted.offset) == (str(sealed), base)
        original = sealed.read_bytes()
        cut_at_damage(log, noted, node_id=1)
        assert log.end_offset() == base  # the damaged batch and everything after it are gone
        assert [b.base_offset for b in log.read(0, 1 << 20)][-1] < base
        [aside] = Path(log.partition_dir).glob("*.corrupt-*")
        assert aside.name.startswith(sealed.name + ".corrupt-")
        assert aside.read_bytes() == original  # kept as it was found, for inspection
        assert not (Path(log.partition_dir) / DAMAGE_NOTE).exists()
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        assert log.end_offset() == base  # the aside copy is not mistaken for a segment


def test_the_scrub_finds_damage_nobody_read_and_passes_clean_logs(tmp_path: Path) -> None:
    import asyncio

    from kraft_spark.net.scrub import LogScrubber

    log_dir, sealed = damaged_log(tmp_path)
    clean_dir = str(tmp_path / "clean")
    with SegmentedLog.open(RealFileSystem(), clean_dir, **OPTIONS) as clean:
        fill(clean, [1] * 60, value_size=50)
        clean.flush()

    async def body() -> None:
        loop = asyncio.get_running_loop()
        with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log, \
                SegmentedLog.open(RealFileSystem(), clean_dir, **OPTIONS) as clean:
            found: asyncio.Future[CorruptSegmentError] = loop.create_future()
            scrub = LogScrubber(log, 10**9, loop, found.set_result).start()
            quiet = LogScrubber(clean, 10**9, loop, found.set_result).start()
            damage = await asyncio.wait_for(found, 10)
            while quiet.stats.passes < 2:
                await asyncio.sleep(0.01)
            scrub.stop()
            quiet.stop()
            assert (damage.path, damage.offset) == (str(sealed), int(sealed.name[:20]))
            assert scrub.stats.damaged == 1
            sealed_bytes = sum(size for _, _, size, _ in clean.segment_spans()[:-1])
            assert quiet.stats.damaged == 0
            assert quiet.stats.bytes_verified >= 2 * sealed_bytes > 0

    asyncio.run(body())


def test_the_scrub_keeps_to_its_rate(tmp_path: Path) -> None:
    import asyncio
    import time

    from kraft_spark.net.scrub import LogScrubber

    log_dir = str(tmp_path / "clean")
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        fill(log, [1] * 60, value_size=50)
        log.flush()

    async def body() -> None:
        loop = asyncio.get_running_loop()
        with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
            scrub = LogScrubber(log, 20_000, loop, lambda d: None).start()  # 20 kB/s
            started = time.monotonic()
            await asyncio.sleep(0.5)
            scrub.stop()
            rate = scrub.stats.bytes_verified / (time.monotonic() - started)
            assert scrub.stats.bytes_verified > 0 and rate < 20_000 * 1.5, rate

    asyncio.run(body())


def test_a_cut_log_takes_a_new_directory_id(tmp_path: Path) -> None:
    """KIP-853: a log that lost records is another replica: meta.properties gets a new
    directory.id, durably, and the open log's view of it follows."""
    log_dir, sealed = damaged_log(tmp_path)
    before = format_log_dir(log_dir, cluster_id=new_directory_id(), node_id=1)
    with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
        base = int(sealed.name.split(".")[0])
        with pytest.raises(CorruptSegmentError) as caught:
            log.read(base, 1 << 20)
        cut_at_damage(log, caught.value, node_id=1)
    after = read_meta_properties(log_dir)
    assert after is not None
    assert (after.cluster_id, after.node_id) == (before.cluster_id, before.node_id)
    assert after.directory_id != before.directory_id and len(after.directory_id) == 22


def test_the_scrub_idles_when_retention_left_nothing_to_read(tmp_path: Path) -> None:
    """Every sealed segment holds the log start (retention cut inside it): a pass reads
    nothing, and the next one waits instead of asking the loop for the spans at once."""
    import asyncio

    from kraft_spark.net.scrub import LogScrubber

    log_dir = str(tmp_path / "retained")

    async def body() -> None:
        loop = asyncio.get_running_loop()
        with SegmentedLog.open(RealFileSystem(), log_dir, **OPTIONS) as log:
            fill(log, [1] * 30, value_size=50)
            log.flush()
            spans = log.segment_spans()
            assert len(spans) == 2  # one sealed segment and the active one
            log.advance_start_offset(spans[0][0] + 1)  # the start inside the sealed one
            scrub = LogScrubber(log, 10**9, loop, lambda d: None).start()
            await asyncio.sleep(0.5)
            scrub.stop()
            assert scrub.stats.bytes_verified == 0
            assert scrub.stats.passes == 1, scrub.stats  # was thousands: a busy loop

    asyncio.run(body())
