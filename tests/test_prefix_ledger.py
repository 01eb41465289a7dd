"""Reuse with one meaning: good-hit counts only what a completed request had computed (<= 1 by
construction); what a request took from one still computing it is sharing in flight, apart; and the
ledger records which earlier request a prompt shares its prefix with (the what-if rebuilds from it)."""

from __future__ import annotations

from array import array

from tests.test_report import META, Run
from tests.test_whatif_fidelity import docs_run
from wavepp.runtime.figures.prefix_ledger import PrefixLedger, split_reuse
from wavepp.runtime.figures.report import compute_figures
from wavepp.runtime.request import Request
from wavepp.runtime.whatif import preview as W
from wavepp.telemetry import names as N


def request(rid: str, hashes: list[int], tokens: int) -> Request:
    return Request(rid, array("I", [0] * tokens), 0.0, hashes)


def test_the_ledger_names_the_request_a_prefix_came_from() -> None:
    ledger = PrefixLedger(block_size=4)
    a = ledger.arrive(request("a", [1, 2, 3], 13))
    b = ledger.arrive(request("b", [1, 2, 9], 13))            # shares two blocks with a, still computing
    assert a == {N.REUSABLE_TOKENS: 0, N.SHARED_PREFIX_TOKENS: 0}
    assert b == {N.REUSABLE_TOKENS: 0, N.SHARED_PREFIX_TOKENS: 8, N.SHARED_WITH: "a"}
    ledger.completed([1, 2, 3])
    c = request("c", [1, 2, 3, 4], 16)                        # its last block holds its last token: not counted
    assert ledger.arrive(c) == {N.REUSABLE_TOKENS: 12, N.SHARED_PREFIX_TOKENS: 12, N.SHARED_WITH: "a"}
    assert c.reusable_blocks == 3
    assert ledger.arrive(request("d", [1, 2, 9, 5], 17))[N.SHARED_WITH] == "b"   # b brought block 9 first


def test_reuse_splits_into_finished_and_in_flight() -> None:
    assert split_reuse(5, 3) == (3, 2)          # two blocks came from a request still computing them
    assert split_reuse(2, 3) == (2, 0)          # one reusable block was evicted
    assert split_reuse(0, 0) == (0, 0)


def test_good_hit_is_at_most_one_with_sharing_in_flight_apart() -> None:
    """Saved spans of any age: a request that reused more than was reusable when it arrived took the
    rest from a request computing it at the same time."""
    run = Run()
    run.request(0.0, 1.0, 1000, reused=512, reusable=0, admitted=0.1)      # all in flight
    run.request(0.5, 2.0, 1000, reused=768, reusable=512, admitted=0.6)    # 512 finished + 256 in flight
    run.request(1.0, 2.5, 1000, reused=256, reusable=512, admitted=1.1)    # 256 evicted
    f = compute_figures(run.spans, 1, META)
    assert f.good_hit_rate == (512 + 256) / (512 + 512)
    assert f.sharing_in_flight == (512 + 256) / 3000


def test_a_docs_run_reports_good_hit_at_most_one_and_its_sharing() -> None:
    run = docs_run("docs:8")
    f = run.figures
    assert f.good_hit_rate is not None and 0.9 < f.good_hit_rate <= 1.0
    assert f.sharing_in_flight is not None and f.sharing_in_flight > 0.05      # 8 documents, 16 clients at once
    spans = [s for s in run.encoded if s["n"] == N.REQUEST and "err" not in s]
    for s in spans:
        a = s["a"]
        assert a[N.REUSED_TOKENS] - a[N.SHARED_IN_FLIGHT_TOKENS] <= a[N.REUSABLE_TOKENS]
    in_flight = sum(s["a"][N.SHARED_IN_FLIGHT_TOKENS] for s in spans)
    assert in_flight / sum(s["a"][N.GEN_AI_INPUT_TOKENS] for s in spans) == f.sharing_in_flight


def test_rebuilt_prompts_follow_the_recorded_sharing() -> None:
    arrivals = [W.Arrival(0.0, 640, 0, 1.0, "a", 0), W.Arrival(0.1, 700, 0, 1.2, "b", 512, "a"),  # in flight
                W.Arrival(0.2, 900, 0, 3.0, "c", 384, "x"),        # shares with one before the window: primed
                W.Arrival(0.3, 900, 0, 3.0, "d", 512, "x"),        # a longer part of the same one
                W.Arrival(0.4, 300, 0, 3.1, "e", 0)]
    trace = W.rebuild_trace(arrivals, 64, open_loop=False)
    a, b, c, d, e = (r.hash_ids for r in trace.rows)
    assert a[:8] == b[:8] and a[8] != b[8]
    assert c[:6] == d[:6] and c[6] != d[6] and not set(d[:8]) & set(a + b)
    assert trace.primed == (d[:8],)
    assert not set(e) & set(a + b + c + d)
