"""The span stream as the dashboard reads it: entries another client appended
(no ``s`` field, not JSON, JSON that is not a span) are skipped and counted once, never raised; the
spans around them come back in order."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest
import redis

from wavepp.dashboard.sources import StoreSource
from wavepp.store.urls import parse_store_url
from wavepp.telemetry.redis_stream import read_spans, stream_key

FOREIGN: list[dict[str, bytes | str]] = [
    {"x": "notjson"},                                       # no "s" field: was KeyError: b's'
    {"s": "notjson"},                                       # not JSON: was JSONDecodeError
    {"s": "[1, 2]"},                                        # JSON, not an object
    {"s": json.dumps({"n": 3, "t0": 1})},                   # an object, not a span
    {"s": b"\xff\xfe{}"},                                   # not UTF-8
    {"s": "[" * 100_000},                                   # nested past the parser's recursion limit
]


def span(i: int, run: str = "run-a") -> dict[str, object]:
    """A span in the compact form the exporter writes (telemetry.span_codec.encode)."""
    return {"n": "wavepp.stage.execute", "t0": 1_000 * i, "t1": 1_000 * i + 500, "a": {"wavepp.stage": 0},
            "id": f"{i:016x}", "tr": f"{i:032x}", "run": run}


@pytest.fixture
def url(redis_cluster: Callable[[str], str]) -> str:
    """A store URL on the local Redis (db 13) under a cluster of its own; its keys deleted after."""
    return redis_cluster("stream")


def _append(client: redis.Redis, url: str, *entries: dict[str, bytes | str]) -> None:
    for fields in entries:
        client.xadd(stream_key(parse_store_url(url)), fields)  # type: ignore[arg-type]


def test_foreign_entries_are_skipped_and_counted(url: str) -> None:
    client = redis.Redis.from_url(url.partition("?")[0])
    good = [span(i) for i in range(4)]
    _append(client, url, {"s": json.dumps(good[0])}, *FOREIGN[:3], {"s": json.dumps(good[1])}, *FOREIGN[3:],
            *({"s": json.dumps(s)} for s in good[2:]))
    read = read_spans(client, parse_store_url(url))
    assert read.spans == good
    assert read.skipped == len(FOREIGN)
    last = client.xrevrange(stream_key(parse_store_url(url)), count=1)[0][0].decode()  # type: ignore[index]
    assert read.last == last                              # the reader moves past the bad entries too
    again = read_spans(client, parse_store_url(url), read.last)
    assert (again.spans, again.skipped, again.last) == ([], 0, last)


def test_the_dashboards_source_shows_the_good_spans_and_reports_the_bad_once(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Today StoreSource.snapshot raises KeyError: b's' at every poll until the stream is deleted."""
    client = redis.Redis.from_url(url.partition("?")[0])
    _append(client, url, {"s": json.dumps(span(0))}, *FOREIGN, {"s": json.dumps(span(1))})
    source = StoreSource(url)
    with caplog.at_level(logging.WARNING):
        snap = source.snapshot()
        assert snap.error is None
        assert [s["id"] for s in snap.spans] == [span(0)["id"], span(1)["id"]]
        assert source.spans_skipped == len(FOREIGN)
        _append(client, url, {"x": "again"}, {"s": json.dumps(span(2))})
        snap = source.snapshot()
        snap = source.snapshot()                          # a poll with nothing new counts nothing again
    assert [s["id"] for s in snap.spans] == [span(i)["id"] for i in range(3)]
    assert source.spans_skipped == len(FOREIGN) + 1
    lines = [r.getMessage() for r in caplog.records if "span stream" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines


@pytest.mark.parametrize("status", [b"notjson", b"[1, 2]", b'{"x": 1}', b'{"t": "soon", "run": 3, "stages": {}}',
                                    b"\xff"])
def test_a_foreign_status_record_or_run_label_never_breaks_the_page(url: str, status: bytes) -> None:
    """The status key and the run labels are read at every poll too: another client's value there is
    ignored (status) or shown with replacement characters (a label that is not UTF-8)."""
    client = redis.Redis.from_url(url.partition("?")[0])
    prefix = f"wavepp:{{{parse_store_url(url).cluster}}}"
    _append(client, url, {"s": json.dumps(span(0))})
    client.set(f"{prefix}:status", status)
    client.hset(f"{prefix}:runs", "run-a", b"\xffbad label")
    snap = StoreSource(url).snapshot()
    assert snap.error is None and [s["id"] for s in snap.spans] == [span(0)["id"]]
    assert snap.status == []
