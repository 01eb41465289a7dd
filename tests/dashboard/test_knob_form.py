"""The Knobs form: every bad field at once, next to itself, with
a bounded echo; integers are plain ASCII digits; values the running deployment cannot use are
refused before they are written; a refusal by the runtime and a corrupt record are banners."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from wavepp.runtime.control.knobs import Deployment
from wavepp.store.records import StatusSnapshot
from wavepp.store.redis_store import RedisStore

from .test_knobs_page import field, fresh_url, knobs_page, version  # type: ignore[import-not-found]


def _apply(url: str, values: dict[str, str]):  # type: ignore[no-untyped-def]
    at = knobs_page(url)
    for name, value in values.items():
        field(at, name).input(value)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_every_bad_field_is_reported_at_once(dashboard_env: None) -> None:
    url = fresh_url()
    at = _apply(url, {"ring": "abc", "max_leases": "-1", "fill_factor": "9" * 5000})
    errors = [e.value for e in at.error]
    assert len(errors) == 3, errors
    assert any("expected an integer" in e and "'abc'" in e for e in errors)
    assert any("-1 is out of range" in e for e in errors)
    assert all(len(e) < 120 for e in errors), errors          # no 5000-digit echo
    assert "Nothing was written" in at.warning[0].value
    assert version(url) == 0


@pytest.mark.parametrize("text", ["8_192", "８１９２", "+8192", "8192.0", "0x2000"])
def test_integers_are_plain_ascii_digits(text: str, dashboard_env: None) -> None:
    url = fresh_url()
    at = _apply(url, {"max_wave_tokens": text})
    assert [e.value for e in at.error] == [f"expected an integer (plain digits), got {text!r}"]
    assert version(url) == 0


def _publish(url: str, deployment: Deployment) -> None:
    async def put() -> None:
        store = await RedisStore.connect(url)
        try:
            await store.deployment_put(deployment)
        finally:
            await store.close()
    asyncio.run(put())


def test_a_budget_the_deployment_cannot_use_is_refused_at_its_field(dashboard_env: None) -> None:
    """`make demo`: 1040 used to be written ("Wrote version 2") and to kill the embedded runtime."""
    url = fresh_url()
    _publish(url, Deployment(block_size=64, num_stages=4))
    at = _apply(url, {"min_wave_tokens": "1040", "max_wave_tokens": "1000"})
    errors = sorted(e.value for e in at.error)
    assert errors == ["1000 is not a multiple of the block size 64 (nearest: 960 or 1024)",
                      "1040 is not a multiple of the block size 64 (nearest: 1024 or 1088)"]
    assert version(url) == 0
    assert any("block size 64, 4 stages" in c.value for c in at.caption)


def test_a_refusal_by_the_runtime_is_a_banner_on_every_page(dashboard_env: None) -> None:
    url = fresh_url()

    async def put() -> None:
        store = await RedisStore.connect(url)
        try:
            await store.status_put(StatusSnapshot(1, knobs_version=3, knobs_refused={
                "version": 4, "reason": "max_wave_tokens: bad", "running": 3}))
        finally:
            await store.close()
    asyncio.run(put())
    from .test_app import run_page  # type: ignore[import-not-found]
    for page in ("Knobs", "Pipeline"):
        at = run_page(f"store:{url}", page)
        assert any("refused knobs version 4: max_wave_tokens: bad" in e.value and "version 3" in e.value
                   for e in at.error), page


def test_a_corrupt_record_is_a_warning_not_a_traceback(dashboard_env: None) -> None:
    url = fresh_url()
    base, _, cluster = url.partition("?cluster=")
    client = redis.Redis.from_url(base)
    try:
        client.set(f"wavepp:{{{cluster}}}:knobs", "not a hash")
        client.set(f"wavepp:{{{cluster}}}:knobs:history", "not a stream")
        at = knobs_page(url)
        assert any("not a hash" in w.value for w in at.warning)
        at = _apply(url, {"ring": "4"})                       # the write replaces it
        assert at.success and "version 1" in at.success[0].value
        assert client.type(f"wavepp:{{{cluster}}}:knobs") == b"hash"
    finally:
        client.delete(*client.keys(f"wavepp:{{{cluster}}}:*") or ["-"])
        client.close()


def test_a_saved_run_without_changes_does_not_promise_a_list(saved_run: Path, dashboard_env: None) -> None:
    from .test_app import run_page  # type: ignore[import-not-found]
    at = run_page(f"run:{saved_run}", "Knobs")
    text = " ".join(i.value for i in at.info)
    assert "listed below" not in text and "No knob changed" in text
