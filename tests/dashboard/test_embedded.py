"""The embedded dashboard outlives its runtime: when the runtime finishes or
crashes, every page shows a banner and a Restart button, never a traceback (it used to be
`RuntimeError: Event loop is closed` on every page), and Restart runs it again - in a new child
process when the old one died."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from wavepp.dashboard import embedded
from wavepp.dashboard.screens import PAGES
from wavepp.runtime.control.knobs import Knobs
from wavepp.runtime.engines.config import SimConfig

from .conftest import APP  # type: ignore[import-not-found]

SIM = SimConfig("llama-3-8b", "h200", 2, clock="wall")


@pytest.fixture
def child(dashboard_env: None) -> Iterator[Any]:
    remotes = []

    def start(**runtime_args: Any) -> embedded.RemoteRuntime:
        remote, _ = embedded.start_child(SIM, {"workload": "suffix:1024", "concurrency": 4,
                                               "prompt_tokens": 2048, **runtime_args})
        remotes.append(remote)
        embedded.CURRENT = remote
        os.environ["WAVEPP_DASHBOARD"] = "embedded"
        st.cache_resource.clear()                 # get_source: a source for this runtime
        return remote

    yield start
    embedded.CURRENT = None
    st.cache_resource.clear()
    for remote in remotes:
        remote.proc.kill()
        remote.proc.join(10)


def _page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _wait_stopped(remote: embedded.RemoteRuntime, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if remote.error:
            return remote.error
        time.sleep(0.1)
    raise AssertionError("the embedded runtime did not stop")


def test_a_finished_runtime_is_a_banner_with_restart_on_every_page(child: Any) -> None:
    remote = child(requests=8)
    assert "finished its 8 requests" in _wait_stopped(remote)
    for page in PAGES:
        at = _page(page)
        assert any("finished its 8 requests" in w.value for w in at.warning), page
        assert [b.label for b in at.button if b.label == "Restart the runtime"], page
    at = _page("Knobs")
    next(b for b in at.button if b.label == "Restart the runtime").click().run()
    assert not at.exception
    assert remote.error is None                               # running again
    deadline = time.monotonic() + 30
    while remote.knobs().version < 1 and time.monotonic() < deadline:
        time.sleep(0.1)                                       # it publishes its knobs once primed
    assert remote.knobs().version >= 1


def test_a_crashed_runtime_is_a_banner_and_a_knob_write_says_why_not(child: Any) -> None:
    remote = child(requests=8, knobs=Knobs(max_wave_tokens=8200))
    assert "stopped: KnobError: max_wave_tokens" in _wait_stopped(remote)
    at = _page("Knobs")
    assert any("stopped: KnobError" in w.value for w in at.warning)
    next(w for w in at.text_input if w.key == "knob_ring").input("4")
    next(b for b in at.button if b.label == "Apply").click().run()
    assert not at.exception
    assert any("restart it before changing knobs" in e.value for e in at.error)


def test_a_killed_runtime_process_is_a_banner_and_restart_starts_a_new_one(child: Any) -> None:
    remote = child()
    old = remote.proc
    old.kill()
    old.join(10)
    at = _page("Pipeline")
    assert any("not answering" in w.value for w in at.warning)
    next(b for b in at.button if b.label == "Restart the runtime").click().run()
    assert not at.exception
    assert remote.proc is not old and remote.proc.is_alive() and remote.error is None
    # A call the new runtime takes more than 5 s to answer (its loop busy starting a run on a loaded machine)
    # is a banner too, rightly: wait until it answers, then the page shows none.
    deadline = time.monotonic() + 30
    while remote.knobs().version < 1 and time.monotonic() < deadline:
        time.sleep(0.1)                                       # it publishes its knobs once primed
    at = _page("Knobs")
    banners = [w.value for w in at.warning if "not answering" in w.value]
    assert not banners, banners


def test_the_runtime_publishes_what_it_runs_and_a_restart_publishes_again(child: Any) -> None:
    """The Preview replays the embedded run from the description the runtime published when it started
    (engine, stages, workload, knobs: runtime.runs.meta), as a bench or a server does, and a restarted
    runtime (a new run in a fresh store) publishes its own."""
    remote = child(requests=8, knobs=Knobs(max_wave_tokens=4096, min_wave_tokens=2048))
    meta = remote.run_meta()
    assert meta is not None and meta["run"]["id"] == remote.run_id
    assert (meta["engine"], meta["pp"], meta["concurrency"], meta["workload"]) == ("sim", 2, 4, "suffix:1024")
    assert len(meta["capacities"]) == 2 and meta["knobs"]["max_wave_tokens"] == 4096
    assert meta["sim"]["clock"] == "wall"                   # replayed on the CPU clock (runtime.whatif.preview)
    _wait_stopped(remote)
    first = remote.run_id
    remote.restart()
    again = remote.run_meta()
    assert again is not None and again["run"]["id"] == remote.run_id != first
