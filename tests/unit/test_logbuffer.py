"""A running job's lines in memory: bounded in lines and in bytes, numbered without gaps."""

from __future__ import annotations

from engine.jobs.logbuffer import MAX_LINE, LogBuffer


def test_long_lines_are_bounded_by_bytes_not_only_by_count() -> None:
    buffer = LogBuffer(max_lines=1000, max_bytes=1 << 20)
    for _ in range(200):  # 200 lines of 64 KiB: 12.5 MiB of text
        buffer.feed("stdout", b"x" * MAX_LINE + b"\n")
    kept = buffer.lines()
    assert sum(len(line.text) for line in kept) <= 2 << 20
    assert buffer.next_seq == 200 and kept[-1].seq == 199
    assert [line.seq for line in kept] == list(range(kept[0].seq, 200))  # the newest, in order


def test_many_short_lines_are_bounded_by_count() -> None:
    buffer = LogBuffer(max_lines=1000)
    buffer.feed("stdout", b"line\n" * 10_000)
    assert len(buffer.lines()) <= 2000 and buffer.lines()[-1].seq == 9999
