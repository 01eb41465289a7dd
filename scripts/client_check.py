"""``make client-check``: aiperf and genai-bench against ``wavepp serve`` on loopback, beside the server's figures.

    python scripts/client_check.py [--aiperf .venv-clients/bin/aiperf] \
        [--genai-bench .venv-clients/genai-bench/bin/python] [--out out/client-check] [--requests 100]

For each engine - the sim (``glm-5.2``, whose context takes the trace's long prompts, on the wall clock) and torch
(``tiny-llama``) - it starts ``wavepp serve`` with its built-in tokenizer, then runs aiperf twice, both on
``/v1/chat/completions`` streamed, with the tokenizer the server announces (loaded by name from the hub-cache layout,
offline): a synthetic profile (fixed prompt length, concurrency 4) and a replay of the first rows of a Mooncake-format
trace (``../shared/data/traces``) on its own timestamps, each row's output length sent as ``max_completion_tokens``.
The torch model's context is 4,096 tokens: its trace is the same rows at 1/32 of their length (aiperf's hash block of
16 tokens instead of 512, so the prefix sharing is the trace's).

The server's own figures come from its ``wavepp.http.request`` spans (``GET /v1/spans``) over the run: requests
answered over the time from the first acceptance to the last answer, the prompt tokens it counted over the same time,
and the time to first token from acceptance (``gen_ai.server.time_to_first_token``). The table puts each beside
aiperf's: request throughput and input tok/s (target: within 3 %), TTFT p50 (within 10 %) and p99, and the requests
that failed (target: none). Where TTFT differs, aiperf's per-request records (``profile_export.jsonl``) find the
server's spans by their X-Request-ID, and the table says how long passed between the client's send and the server's
acceptance, and between the server's answer and the client's first token (one machine, one clock): a TTFT p50 off by
more than 10 % passes only when the client's TTFT less those two is the server's.

With ``--genai-bench`` (the python of SGLang's genai-bench's virtualenv) it also runs genai-bench's synthetic profile
(the same prompt length and concurrency, chat, streamed, the same tokenizer loaded offline) through
``genai_bench_prefill.py``: genai-bench 0.0.5 drops every one-token answer, all of a prefill server's; the same
script sends an X-Request-ID with each request and records its send and first data line, and the TTFT gap is split
as aiperf's is. Writes ``<out>.json``, ``<out>.md``
and the clients' artifacts under ``<out>-runs/``; exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "traces" / "dynamo_mooncake_trace_1000.jsonl"
HTTP_SPAN, TTFT, TOKENS = "wavepp.http.request", "gen_ai.server.time_to_first_token", "gen_ai.usage.input_tokens"
CLIENT_ID = "http.request.header.x-request-id"
RECORDS = "requests.jsonl"           # genai_bench_prefill.py's per-request records, in genai-bench's folder
TRACE_BLOCK = 512                    # tokens per hash id in the Mooncake traces
ENGINES = {
    "sim": {"flags": ["--engine", "sim", "--model", "glm-5.2", "--pp", "2", "--time-scale", "0.05"],
            "isl": 2048, "osl": 16, "trace_scale": 1, "block": 512, "genai_requests": 600},
    "torch": {"flags": ["--engine", "torch", "--model", "tiny-llama", "--pp", "2", "--block-size", "16"],
              "isl": 512, "osl": 16, "trace_scale": 32, "block": 16, "genai_requests": 24},
}
TARGETS = {"request_throughput": 3.0, "input_tok_s": 3.0, "ttft_p50_ms": 10.0}


def start_server(flags: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "wavepp", "serve", "--port", "0", *flags], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"wavepp serve {' '.join(flags)} did not start (exit {proc.wait(10)})")
    url = json.loads(line)["listening"]
    deadline = time.monotonic() + 120
    while httpx.get(f"{url}/ready", timeout=10).status_code != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"wavepp serve at {url} never became ready")
        time.sleep(0.2)
    return proc, url


def trace_file(folder: Path, rows: int, scale: int) -> Path:
    """The trace's first ``rows`` rows, prompts ``1/scale`` of their length: the same hash ids, each block
    ``TRACE_BLOCK / scale`` tokens, the last one scaled and at least one token (aiperf's loader requires it)."""
    out = folder / f"trace-{rows}-{scale}.jsonl"
    block = TRACE_BLOCK // scale
    with TRACE.open() as src, out.open("w") as dst:
        for _, line in zip(range(rows), src, strict=False):
            row = json.loads(line)
            whole = len(row["hash_ids"]) - 1
            last = row["input_length"] - whole * TRACE_BLOCK
            row["input_length"] = whole * block + max(1, math.ceil(last / scale))
            dst.write(json.dumps(row) + "\n")
    return out


def run_aiperf(aiperf: str, args: list[str], env: dict[str, str], out: Path) -> dict[str, Any]:
    cmd = [aiperf, "profile", *args, "--output-artifact-dir", str(out), "--ui-type", "none"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"aiperf failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return dict(json.loads((out / "profile_export_aiperf.json").read_text()))


def run_genai_bench(python: str, args: list[str], env: dict[str, str], out: Path) -> dict[str, Any]:
    """genai-bench through ``genai_bench_prefill.py`` (its CLI, one-token answers kept); its one run's report."""
    shutil.rmtree(out, ignore_errors=True)         # its report is found by name: none of an earlier run
    env = {**env, "GENAI_BENCH_RECORDS": str(out / RECORDS)}
    cmd = [python, str(ROOT / "scripts" / "genai_bench_prefill.py"), "benchmark", *args,
           "--experiment-base-dir", str(out.parent), "--experiment-folder-name", out.name, "--log-dir", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    reports = sorted(out.glob("*_num_concurrency_*.json"))
    if done.returncode != 0 or len(reports) != 1:
        raise SystemExit(f"genai-bench failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return dict(json.loads(reports[0].read_text()))


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as aiperf reports them)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def server_spans(url: str, after: int) -> list[dict[str, Any]]:
    """The answered HTTP spans after sequence number ``after``, and the failed ones."""
    spans: list[dict[str, Any]] = []
    while True:
        page = httpx.get(f"{url}/v1/spans", params={"after": after}, timeout=60).json()
        if not page["spans"]:
            break
        spans += page["spans"]
        after = page["last"]
    return [s for s in spans if s["n"] == HTTP_SPAN]


def server_figures(http: list[dict[str, Any]], stops: bool = False) -> dict[str, float]:
    """The server's figures over its spans. ``stops``: the client cancels its requests in flight when it stops
    (genai-bench); those (answered 499 "client disconnected") are counted as cancelled, not failed."""
    ok = [s for s in http if TTFT in s["a"]]
    cancelled = sum(1 for s in http if stops and TTFT not in s["a"] and s.get("err") == "client disconnected")
    seconds = (max(s["t1"] for s in ok) - min(s["t0"] for s in ok)) / 1e9
    ttft = [float(s["a"][TTFT]) * 1e3 for s in ok]
    return {"requests": len(ok), "failed": len(http) - len(ok) - cancelled, "cancelled": cancelled,
            "request_throughput": len(ok) / seconds,
            "input_tok_s": sum(int(s["a"][TOKENS]) for s in ok) / seconds,
            "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99)}


def client_figures(report: dict[str, Any]) -> dict[str, float]:
    count = report["request_count"]["avg"]
    errors = report.get("error_summary") or []
    return {"requests": count, "failed": sum(int(e.get("count", 0)) for e in errors),
            "request_throughput": report["request_throughput"]["avg"],
            "input_tok_s": report["input_token_throughput"]["avg"],
            "ttft_p50_ms": report["time_to_first_token"]["p50"], "ttft_p99_ms": report["time_to_first_token"]["p99"]}


def genai_bench_figures(report: dict[str, Any]) -> dict[str, float]:
    """genai-bench's figures (seconds in its report) in the table's units: requests over its run's duration, the
    prompt tokens the server reported (``usage.prompt_tokens``) over the same, TTFT percentiles."""
    agg = report["aggregated_metrics"]
    ttft = agg["stats"]["ttft"]
    return {"requests": agg["num_completed_requests"], "failed": agg["num_error_requests"],
            "request_throughput": agg["requests_per_second"], "input_tok_s": agg["mean_input_throughput_tokens_per_s"],
            "ttft_p50_ms": ttft["p50"] * 1e3, "ttft_p99_ms": ttft["p99"] * 1e3}


def aiperf_records(artifacts: Path) -> list[tuple[str | None, int, float | None]]:
    """aiperf's per-request records: X-Request-ID, send time (ns, wall clock), TTFT (ms)."""
    rows = []
    for line in (artifacts / "profile_export.jsonl").read_text().splitlines():
        record = json.loads(line)
        ttft = record["metrics"].get("time_to_first_token")
        rows.append((record["metadata"].get("x_request_id"), int(record["metadata"]["request_start_ns"]),
                     None if ttft is None else float(ttft["value"])))
    return rows


def genai_bench_records(path: Path) -> list[tuple[str | None, int, float | None]]:
    """The same from the records ``genai_bench_prefill.py`` writes: its X-Request-ID, send and first data line."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["id"], int(r["sent_ns"]), (r["first_ns"] - r["sent_ns"]) / 1e6) for r in rows]


def delays(records: list[tuple[str | None, int, float | None]], http: list[dict[str, Any]]) -> dict[str, float]:
    """Where a client's TTFT goes beyond the server's, per request (the client's X-Request-ID finds the server's
    span; both clocks are this machine's): from the client's send to the server's acceptance, and from the
    server's answer to the first token at the client; p50 of each, in ms, over the requests matched."""
    spans = {s["a"][CLIENT_ID]: s for s in http if TTFT in s["a"] and CLIENT_ID in s["a"]}
    before, after, residual = [], [], []
    for rid, start, ttft in records:
        span = spans.get(rid or "")
        if span is None or ttft is None:
            continue
        first = start + ttft * 1e6
        before.append((span["t0"] - start) / 1e6)
        after.append((first - span["t1"]) / 1e6)
        residual.append(ttft - before[-1] - after[-1])
    if not before:
        return {"matched": 0}
    return {"matched": len(before), "send_to_accept_p50_ms": percentile(before, 50),
            "answer_to_client_p50_ms": percentile(after, 50), "client_minus_delays_p50_ms": percentile(residual, 50)}


def cursor(url: str) -> int:
    return int(httpx.get(f"{url}/v1/spans", params={"after": 1 << 62}, timeout=60).json()["last"])


def check(engine: str, aiperf: str | None, genai: str | None, requests: int, rows: int,
          work: Path) -> list[dict[str, Any]]:
    spec = ENGINES[engine]
    env = {**os.environ, "WAVEPP_CACHE": str(work / "cache")}
    proc, url = start_server(spec["flags"], env)
    try:
        [model] = httpx.get(f"{url}/v1/models", timeout=30).json()["data"]
        tok = model["tokenizer"]
        client_env = {**os.environ, "HF_HOME": tok["hf_home"], "HF_HUB_OFFLINE": "1"}
        common = ["--model", model["id"], "--url", url, "--endpoint-type", "chat", "--streaming",
                  "--tokenizer", tok["name"]]
        runs = {"synthetic": [*common, "--isl", str(spec["isl"]), "--isl-stddev", "0", "--osl", str(spec["osl"]),
                              "--request-count", str(requests), "--concurrency", "4"],
                "mooncake trace": [*common, "--input-file", str(trace_file(work, rows, spec["trace_scale"])),
                                   "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
                                   "--isl-block-size", str(spec["block"])]}
        results = []
        for name, args in runs.items() if aiperf else ():
            after = cursor(url)
            artifacts = work / f"{engine}-{name.replace(' ', '-')}"
            report = run_aiperf(str(aiperf), args, client_env, artifacts)
            time.sleep(0.5)                  # the last spans reach the ring
            http = server_spans(url, after)
            results.append({"engine": engine, "model": model["id"], "run": f"aiperf, {name}",
                            "command": "aiperf profile " + " ".join(args), "client": client_figures(report),
                            "server": server_figures(http), "delays": delays(aiperf_records(artifacts), http)})
        if genai:
            # genai-bench's synthetic profile: the same prompt length and concurrency as aiperf's, its own prompts
            # (lines of its built-in sonnet cut to the length by the tokenizer), chat, streamed. It counts its
            # figures over the run from its start to its stop (it checks the count once a second, and cancels the
            # requests in flight then): enough requests for a run of tens of seconds keeps those edges small.
            args = ["--api-backend", "openai", "--api-base", url, "--api-key", "none", "--task", "text-to-text",
                    "--api-model-name", model["id"], "--model-tokenizer", tok["name"], "--num-concurrency", "4",
                    "--traffic-scenario", f"D({spec['isl']},{spec['osl']})",
                    "--max-requests-per-run", str(spec["genai_requests"]), "--max-time-per-run", "30"]
            after = cursor(url)
            artifacts = work / f"{engine}-genai-bench"
            report = run_genai_bench(genai, args, client_env, artifacts)
            time.sleep(0.5)
            http = server_spans(url, after)
            results.append({"engine": engine, "model": model["id"], "run": "genai-bench, synthetic",
                            "command": "genai-bench benchmark " + " ".join(args),
                            "client": genai_bench_figures(report), "server": server_figures(http, stops=True),
                            "delays": delays(genai_bench_records(artifacts / RECORDS), http),
                            "server_errors": sorted({str(s.get("err")) for s in http if TTFT not in s["a"]})})
        return results
    finally:
        proc.terminate()
        proc.wait(60)


def table(results: list[dict[str, Any]]) -> tuple[str, bool]:
    lines = ["| engine | client, run | figure | client | server | gap | target |", "|---|---|---|---|---|---|---|"]
    passed = True
    for r in results:
        c, s = r["client"], r["server"]
        for key, label in (("requests", "requests answered"), ("failed", "failed"),
                           ("request_throughput", "request throughput (req/s)"), ("input_tok_s", "input tok/s"),
                           ("ttft_p50_ms", "TTFT p50 (ms)"), ("ttft_p99_ms", "TTFT p99 (ms)")):
            gap = (c[key] - s[key]) / s[key] * 100 if s[key] else 0.0
            limit = TARGETS.get(key)
            ok = (abs(gap) <= limit) if limit is not None else (c["failed"] == 0 and s["failed"] == 0
                                                                 if key == "failed" else True)
            explained = False
            if key == "ttft_p50_ms" and not ok and r["delays"].get("matched"):
                # The alternative to 10 %: the gap explained, measured. It is, when the client's TTFT less
                # the time outside the server's span (per request) is the server's TTFT: the gap is all outside.
                d = r["delays"]
                ok = explained = abs(d["client_minus_delays_p50_ms"] - s[key]) <= limit / 100 * s[key]
            passed = passed and ok
            target = f"±{limit:g} %" if limit is not None else ("0" if key == "failed" else "")
            gap_text = f"{gap:+.1f} %" if key not in ("requests", "failed") else ""
            if key == "failed" and s.get("cancelled"):
                gap_text = f"and {s['cancelled']} the client cancelled as it stopped"
            lines.append(f"| {r['engine']} ({r['model']}) | {r['run']} | {label} | {c[key]:,.4g} | {s[key]:,.4g} | "
                         f"{gap_text} | {target}{'' if ok else ' **missed**'}"
                         f"{' - outside it: the time outside the server (next row)' if explained else ''} |")
        d = r["delays"]
        if d.get("matched"):
            lines.append(f"| {r['engine']} ({r['model']}) | {r['run']} | TTFT outside the server, p50 over "
                         f"{d['matched']} requests (ms) | send → accepted {d['send_to_accept_p50_ms']:.1f}, answered → "
                         f"first token at the client {d['answer_to_client_p50_ms']:.1f} | client TTFT less both, "
                         f"p50: {d['client_minus_delays_p50_ms']:.4g} (one clock: the server's TTFT) |  |  |")
    return "\n".join(lines), passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", help="the aiperf executable (its own virtualenv)")
    parser.add_argument("--genai-bench", dest="genai", metavar="PYTHON",
                        help="the python of genai-bench's virtualenv (it runs scripts/genai_bench_prefill.py)")
    parser.add_argument("--out", default="out/client-check", help="writes OUT.json and OUT.md")
    parser.add_argument("--requests", type=int, default=100, help="requests of the synthetic profile")
    parser.add_argument("--trace-rows", type=int, default=100, help="rows of the trace replayed")
    parser.add_argument("--engine", action="append", choices=sorted(ENGINES), help="default: both")
    parser.add_argument("--table", metavar="JSON", help="only print the table of an earlier run's OUT.json")
    args = parser.parse_args()
    if not (args.table or args.aiperf or args.genai):
        parser.error("name a client: --aiperf, --genai-bench or both")
    if args.table:
        print(table(json.loads(Path(args.table).read_text()))[0])
        return 0
    results = []
    out = Path(args.out)
    work = out.with_name(out.name + "-runs")          # aiperf's artifacts, the traces, the tokenizer cache
    work.mkdir(parents=True, exist_ok=True)
    for engine in args.engine or sorted(ENGINES):
        results += check(engine, args.aiperf, args.genai, args.requests, args.trace_rows, work)
    text, passed = table(results)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    commands = "\n".join(f"- {r['engine']}, {r['run']}: `{r['command']}`" for r in results)
    note = "HF_HOME and HF_HUB_OFFLINE=1 set; genai-bench's through scripts/genai_bench_prefill.py"
    out.with_suffix(".md").write_text(f"{text}\n\nthe clients' commands ({note}):\n{commands}\n")
    print(text)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
