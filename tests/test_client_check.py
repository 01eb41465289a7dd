"""``scripts/client_check.py``'s figures from genai-bench's report and its per-request records: the server's
spans are found by the client's X-Request-ID, requests the client cancels as it stops are not failures, and a TTFT
gap all outside the server passes as explained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.scripts_loader import load_script

cc = load_script("client_check.py", "client_check")
MS = 1_000_000


def _span(rid: str, t0_ms: int, t1_ms: int, tokens: int = 100, err: str | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {cc.TOKENS: tokens, cc.CLIENT_ID: rid}
    if err is None:
        attrs[cc.TTFT] = (t1_ms - t0_ms) / 1e3
    span = {"n": cc.HTTP_SPAN, "t0": t0_ms * MS, "t1": t1_ms * MS, "a": attrs}
    return span | ({"err": err} if err else {})


def _report(ttft_s: list[float], rps: float) -> dict[str, Any]:
    return {"aggregated_metrics": {
        "num_completed_requests": len(ttft_s), "num_error_requests": 0, "requests_per_second": rps,
        "mean_input_throughput_tokens_per_s": rps * 100,
        "stats": {"ttft": {"p50": cc.percentile(ttft_s, 50), "p99": cc.percentile(ttft_s, 99)}}}}


def test_cancelled_at_the_stop_is_not_a_failure_for_genai_bench_but_is_for_aiperf() -> None:
    http = [_span("a", 0, 10), _span("b", 5, 20), _span("c", 15, 30, err="client disconnected"),
            _span("d", 16, 31, err="engine failed")]
    stopped = cc.server_figures(http, stops=True)
    assert (stopped["requests"], stopped["failed"], stopped["cancelled"]) == (2, 1, 1)
    assert stopped["request_throughput"] == 2 / 0.020           # first acceptance to last answer
    plain = cc.server_figures(http)
    assert (plain["failed"], plain["cancelled"]) == (2, 0)


def test_ttft_gap_outside_the_server_is_split_per_request_from_genai_bench_records(tmp_path: Path) -> None:
    # Each request: sent at s, accepted 30 ms later, answered 20 ms after that, first token read 10 ms later.
    sends = [0, 100, 200, 300]
    http = [_span(f"r{i}", s + 30, s + 50) for i, s in enumerate(sends)]
    records = tmp_path / cc.RECORDS
    records.write_text("".join(json.dumps({"id": f"r{i}", "sent_ns": s * MS, "first_ns": (s + 60) * MS}) + "\n"
                               for i, s in enumerate(sends)))
    split = cc.delays(cc.genai_bench_records(records), http)
    assert split["matched"] == 4
    assert round(split["send_to_accept_p50_ms"], 6) == 30
    assert round(split["answer_to_client_p50_ms"], 6) == 10
    assert round(split["client_minus_delays_p50_ms"], 6) == 20
    assert cc.delays(cc.genai_bench_records(tmp_path / "none.jsonl"), http) == {"matched": 0}

    result = {"engine": "sim", "model": "m", "run": "genai-bench, synthetic",
              "client": cc.genai_bench_figures(_report([0.06] * 4, 13.0)),
              "server": cc.server_figures(http, stops=True), "delays": split}
    for key in ("request_throughput", "input_tok_s"):           # the rates agree; only TTFT differs
        result["client"][key] = result["server"][key]
    assert result["client"]["ttft_p50_ms"] == 60.0
    text, passed = cc.table([result])
    assert passed, text                                         # 60 ms vs 20 ms: all of it outside the server
    assert "the time outside the server" in text
