"""`wavepp knobs`: an operator reads and changes the knobs in a shared store; bad writes change nothing."""

from __future__ import annotations

import asyncio

import pytest

from wavepp.runtime.cli import main
from wavepp.runtime.control.knobs import Deployment
from wavepp.store.redis_store import RedisStore


def knobs_version(url: str) -> tuple[int, dict[str, object]]:
    async def read() -> tuple[int, dict[str, object]]:
        store = await RedisStore.connect(url)
        try:
            record = await store.knobs_get()
            return record.version, record.values
        finally:
            await store.close()
    return asyncio.run(read())


def publish_deployment(url: str) -> None:
    """A runtime of block size 64 and 4 stages on the store, as ``wavepp serve`` publishes it at start."""
    async def publish() -> None:
        store = await RedisStore.connect(url)
        try:
            await store.deployment_put(Deployment(block_size=64, num_stages=4))
        finally:
            await store.close()
    asyncio.run(publish())


def test_set_then_show(redis_store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["knobs", "--store", redis_store_url, "--set", "max_wave_tokens=8192",
                 "--set", "min_wave_tokens=4096", "--set", "hysteresis=false"]) == 0
    version, values = knobs_version(redis_store_url)
    assert version == 1
    assert (values["max_wave_tokens"], values["min_wave_tokens"], values["hysteresis"]) == (8192, 4096, False)
    out = capsys.readouterr().out
    assert "knobs version 1" in out and "max_wave_tokens        8192" in out


@pytest.mark.parametrize("change, field", [
    ("min_wave_tokens=20000", "min_wave_tokens"),   # b_min > M
    ("ring=abc", "ring"),                           # wrong type
    ("max_leases=0", "max_leases"),                 # out of range
    ("policy=fastest", "policy"),                   # not a policy
    ("nope=1", "nope"),                             # unknown knob
    ("max_wave_tokens=1000", "max_wave_tokens"),    # M < b_min: the knob the operator set is blamed
    ("ring=-4", "ring"),                            # negative
    ("max_wave_tokens=8_192", "max_wave_tokens"),   # integers are plain ASCII digits
    ("max_wave_tokens=１６３８４", "max_wave_tokens"),  # full-width digits
    ("hysteresis=1", "hysteresis"),                 # booleans are true/false
])
def test_invalid_write_is_one_line_and_writes_nothing(redis_store_url: str, change: str, field: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = knobs_version(redis_store_url)
    assert main(["knobs", "--store", redis_store_url, "--set", change]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"wavepp: error: {field}:")
    assert knobs_version(redis_store_url) == before


def test_malformed_set_and_memory_store_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["knobs", "--store", "memory"]) == 2
    assert main(["knobs", "--store", "redis://127.0.0.1:6379/0", "--set", "novalue"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("wavepp: error:") for line in err)


def test_a_value_the_running_deployment_cannot_use_is_refused(redis_store_url: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14: with a runtime of block size 64 on the store, 8200 tokens is refused up front (exit 2,
    nothing written) instead of being stored and crashing the runtime at its next wave."""
    publish_deployment(redis_store_url)
    before = knobs_version(redis_store_url)
    assert main(["knobs", "--store", redis_store_url, "--set", "max_wave_tokens=8200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["wavepp: error: max_wave_tokens: 8200 is not a multiple of the block size 64 "
                   "(nearest: 8192 or 8256)"]
    assert knobs_version(redis_store_url) == before
    assert main(["knobs", "--store", redis_store_url, "--set", "max_wave_tokens=8256"]) == 0
    assert "block size 64, 4 stages" in capsys.readouterr().out


def test_every_bad_value_is_named_on_one_line(redis_store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["knobs", "--store", redis_store_url, "--set", "ring=abc", "--set", "max_leases=0",
                 "--set", "fill_factor=" + "9" * 5000]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert all(f"{name}:" in line for name in ("ring", "max_leases", "fill_factor"))
    assert len(line) < 400                                  # bounded echo of the 5000-digit value
    assert knobs_version(redis_store_url)[0] == 0


def test_a_bad_value_does_not_hide_one_the_deployment_cannot_use(redis_store_url: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24 (11): ``--set max_wave_tokens=8200 --set ring=-1`` named only the ring; every bad knob is named,
    as ``PUT /v1/knobs`` does, and nothing is written."""
    publish_deployment(redis_store_url)
    before = knobs_version(redis_store_url)
    assert main(["knobs", "--store", redis_store_url, "--set", "max_wave_tokens=8200", "--set", "ring=-1"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("wavepp: error: ring: -1 is out of range")
    assert "max_wave_tokens: 8200 is not a multiple of the block size 64" in line
    assert knobs_version(redis_store_url) == before
