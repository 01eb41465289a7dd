"""What the store reads from Redis is plain data: parsed as JSON (or split as text) and never run.

Two halves. The source: no module that reads Redis (``store/``, ``telemetry/redis_stream.py`` and
the span codec it decodes with) imports a decoder that can run code (pickle, marshal, shelve, YAML,
...) or calls eval/exec/compile/``__import__``, no Lua script loads code, and every JSON parse of a
stored record goes through the one size- and depth-checked helper (``store.redis_records.load_json``;
spans: ``telemetry.span_codec.loads``). The behaviour: entries another client wrote into real Redis
keys of every kind the store reads - a pickle whose loading would create a file, Python and YAML that
would, bytes that are not UTF-8, text that is not JSON, JSON nested past the parser's limit, JSON of
the wrong shape, and a record that is valid but longer than the limit - are refused or skipped with a
clear message (a log line, a note, a count), the entries around them still read, no reader raises,
and the file is never created."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import marshal
import pathlib
import pickle
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from wavepp.runtime.control.knobs import validated_values
from wavepp.store import redis_records
from wavepp.store.base import RegistryEntry
from wavepp.store.records import PlannedChunk, WavePlanRecord
from wavepp.store.redis_knobs import read_knobs
from wavepp.store.redis_records import MAX_RECORD_BYTES, decode_status, read_run_meta
from wavepp.store.redis_store import RedisStore, pack
from wavepp.store.urls import StoreUrl
from wavepp.telemetry.redis_stream import MAX_LABEL_BYTES, read_run_labels, read_spans
from wavepp.telemetry.span_codec import MAX_SPAN_BYTES

ROOT = Path(__file__).resolve().parents[2]
READERS = sorted((ROOT / "store").glob("*.py")) + [ROOT / "telemetry" / "redis_stream.py",
                                                   ROOT / "telemetry" / "span_codec.py"]
# Decoders that can run code while they decode (a pickle names a callable and its arguments).
UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle",
                  "yaml", "ruamel", "joblib", "torch"}
# Builtins that run or compile text (called by bare name: ``re.compile`` and redis-py's ``client.eval``,
# Redis's own EVAL of our Lua scripts, are other things), and importlib's loader by name.
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__", "execfile", "breakpoint"}
# json.loads hooks build objects of the caller's choosing: plain data needs none.
JSON_HOOKS = {"cls", "object_hook", "object_pairs_hook"}
LUA_LOADERS = re.compile(r"\b(loadstring|loadfile|dofile|load|require)\s*\(")


# ---- the source ----------------------------------------------------------------------------------


def unsafe(source: str) -> list[str]:
    """``line: what`` for every import of an unsafe decoder, call of eval/exec/… and json hook."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if (isinstance(func, ast.Name) and name in UNSAFE_BUILTINS) or name == "import_module":
                found.append(f"{node.lineno}: {name}()")
            if name == "loads" and any(k.arg in JSON_HOOKS for k in node.keywords):
                found.append(f"{node.lineno}: loads() with a hook")
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                    and func.value.id in UNSAFE_MODULES:              # pickle.loads, yaml.load, marshal.loads, …
                found.append(f"{node.lineno}: {func.value.id}.{func.attr}()")
    return sorted(found)


def json_parses(source: str) -> list[str]:
    """The functions in which ``json.loads`` is called, one name per call."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "loads" \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "json":
                    found.append(fn.name)
    return found


def test_the_scan_finds_every_way_of_running_stored_data() -> None:
    """The scanner itself: each unsafe form in a snippet is found (a scan that finds nothing proves nothing)."""
    snippet = "\n".join([
        "import pickle", "import yaml", "from marshal import loads", "import dill.settings",
        "x = pickle.loads(raw)", "y = yaml.load(raw)", "z = yaml.unsafe_load(raw)", "eval(raw)", "exec(raw)",
        "compile(raw, 'f', 'exec')", "__import__(raw)", "importlib.import_module(raw)", "re.compile(raw)",
        "json.loads(raw, object_hook=make)", "json.loads(raw)",
    ])
    assert len(unsafe(snippet)) == 13, unsafe(snippet)
    assert json_parses("import json\ndef f(raw):\n    return json.loads(raw)\n") == ["f"]


def test_no_reader_of_redis_can_run_what_it_reads() -> None:
    assert {p.name for p in READERS} >= {"redis_store.py", "redis_records.py", "redis_knobs.py", "redis_stream.py"}
    found = {str(p.relative_to(ROOT)): unsafe(p.read_text()) for p in READERS}
    assert {path: hits for path, hits in found.items() if hits} == {}
    scripts = sorted((ROOT / "store" / "lua").glob("*.lua"))
    assert scripts and {p.name: LUA_LOADERS.findall(p.read_text()) for p in scripts
                        if LUA_LOADERS.search(p.read_text())} == {}


def test_every_stored_json_record_is_parsed_by_the_checked_helper() -> None:
    """``load_json`` checks the size and the nesting before it parses; ``span_codec.loads`` the same for spans.
    (The memory store keeps JSON copies of what it was handed; it never reads Redis.)"""
    parses = {p.name: json_parses(p.read_text()) for p in READERS if p.name != "memory.py"}
    assert {name: fns for name, fns in parses.items() if fns} == {"redis_records.py": ["load_json"],
                                                                   "span_codec.py": ["loads"]}


# ---- the behaviour, on a real Redis --------------------------------------------------------------


class _Touch:
    """Unpickling this creates ``path``: what a store that unpickled a foreign entry would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.touch, (self.path,))


def payloads(sentinel: Path) -> dict[str, bytes]:
    """Foreign entries by name; ``oversized`` is filled in per kind (a valid record, too long)."""
    python = f"__import__('pathlib').Path({str(sentinel)!r}).touch()"
    return {
        "pickle": pickle.dumps(_Touch(sentinel)),
        "marshal": marshal.dumps(compile(python, "<payload>", "exec")),
        "python": python.encode(),
        "yaml": f"!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path [{sentinel}]]"
                .encode(),
        "not-utf8": b'{"wave": "\xff\x80"}',              # a JSON object but for two bytes
        "not-json": b"{not json",
        "nested": b"[" * 100_000,
        "not-an-object": b"[1, 2, 3]",
        "oversized": b"",
    }


PAYLOADS = list(payloads(Path("x")))


def test_the_payloads_would_run_if_they_were_decoded_as_code(tmp_path: Path) -> None:
    """The control: unpickling the pickle, or evaluating the Python, creates the file the tests watch."""
    sentinel = tmp_path / "executed"
    found = payloads(sentinel)
    pickle.loads(found["pickle"])
    assert sentinel.exists()
    sentinel.unlink()
    eval(found["python"])                                         # the point of the control
    assert sentinel.exists()


def _padded(record: bytes, limit: int = MAX_RECORD_BYTES) -> bytes:
    """``record`` followed by whitespace past ``limit``: still valid JSON, only too long."""
    return record + b" " * (limit + 1 - len(record))


Check = Callable[[RedisStore, redis.Redis, StoreUrl, bytes], Awaitable[None]]
PLAN = WavePlanRecord(1, 64, 0.5, "wavepp", (PlannedChunk("r1", 0, 64, 0, True),))
PLAN_JSON = json.dumps(PLAN.to_json()).encode()
STATUS_JSON = b'{"t": 5, "run": "r", "stages": []}'
SPAN = {"n": "wavepp.wave", "t0": 1, "t1": 2, "a": {}, "id": "00000000000000aa", "run": "r"}


async def check_hint(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    """A residency count that is not an integer: the next attach sets it to 1, a detach drops it."""
    key = store.key("hint", 0)
    client.hset(key, pack([77]), payload)
    await store.hint_update(0, [77], [])
    assert client.hget(key, pack([77])) == b"1"
    client.hset(key, pack([77]), payload)
    await store.hint_update(0, [], [77])
    assert not client.hexists(key, pack([77]))
    assert (await store.hint_lookup([[77]], [0]))[0].per_stage == (0,)
    client.sadd(store.key("hint", "stages"), payload)                # a member that names no stage
    await store.hint_clear()
    assert not client.exists(key, store.key("hint", "stages"))


async def check_registry(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    good = RegistryEntry("r1", "me", (0, 1), 2, 3)
    await store.registry_put([good], 10)
    client.hset(store.key("registry", "entries"), "bad", payload)
    assert await store.registry_entries() == [good]
    assert await store.registry_reap() == []          # reaped when it names no live holder, skipped either way
    assert await store.registry_entries() == [good]


async def check_plans(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.xadd(store.key("plans"), {"plan": PLAN_JSON})
    client.xadd(store.key("plans"), {"plan": payload})
    client.xadd(store.key("plans"), {"other": payload})
    assert await store.plans_recent(10) == [PLAN]


async def check_in_flight(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.hset(store.key("plans", "in_flight"), mapping={"1": PLAN_JSON, "2": payload, "9" * 5000: payload})
    assert await store.plans_in_flight() == [PLAN]


async def check_knobs_values(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.hset(store.key("knobs"), mapping={"version": "3", "values": payload})
    record = await store.knobs_get()
    assert (record.version, record.values) == (0, {}) and record.note and "read as absent" in record.note
    assert read_knobs(client, store.prefix, 5)[0] == record             # the dashboard's reader
    written = await store.knobs_set({"ring": 4}, validate=validated_values)   # and a write replaces it
    assert written.version == 1 and (await store.knobs_get()).values["ring"] == 4


async def check_knobs_version(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.hset(store.key("knobs"), mapping={"version": payload, "values": "{}"})
    record = await store.knobs_get()
    assert (record.version, record.values) == (0, {}) and record.note and "read as absent" in record.note
    assert (await store.knobs_set({"ring": 4}, validate=validated_values)).version == 1


async def check_history(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    key = store.key("knobs", "history")
    client.xadd(key, {"version": "1", "time": "1.5", "changes": '{"ring": 4}'})
    client.xadd(key, {"version": "2", "time": "2.5", "changes": payload})
    client.xadd(key, {"version": payload, "time": payload, "changes": '{"ring": 8}'})
    expected = [{"version": 1, "time": 1.5, "changes": {"ring": 4}}]
    assert await store.knobs_history(10) == expected
    assert read_knobs(client, store.prefix, 10)[1] == expected


async def check_deployment(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.set(store.key("deployment"), payload)
    record = await store.knobs_get()
    assert record.deployment is None and record.note and "the deployment record" in record.note


async def check_status(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.set(store.key("status"), payload)
    assert await store.status_get() is None
    assert decode_status(client.get(store.key("status"))) is None     # the dashboard's reader


async def check_run_meta(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    client.hset(store.key("runs:meta"), mapping={"bad": payload, "good": '{"engine": "sim"}'})
    assert await store.run_meta_get("bad") is None and read_run_meta(client, store.prefix, "bad") is None
    assert await store.run_meta_get("good") == {"engine": "sim"} == read_run_meta(client, store.prefix, "good")


async def check_labels(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    """A run label is text to show: another client's bytes are shown as text (never run), or left out
    when longer than the limit."""
    client.hset(store.key("runs"), mapping={"bad": payload, "good": "wavepp · reuse90"})
    labels = read_run_labels(client, url)
    assert labels["good"] == "wavepp · reuse90"
    if len(payload) > MAX_LABEL_BYTES:
        assert "bad" not in labels
    else:
        assert labels["bad"] == payload.decode(errors="replace")


async def check_spans(store: RedisStore, client: redis.Redis, url: StoreUrl, payload: bytes) -> None:
    key = store.key("spans")
    client.xadd(key, {"s": json.dumps(SPAN)})
    client.xadd(key, {"s": payload})
    client.xadd(key, {"s": json.dumps({**SPAN, "id": "00000000000000bb"})})
    read = read_spans(client, url)
    assert [s["id"] for s in read.spans] == ["00000000000000aa", "00000000000000bb"] and read.skipped == 1


# Each kind: its check, what a valid entry of it looks like (padded past the limit for ``oversized``),
# the limit, and the log line that names a refused entry (None: the check itself shows the refusal).
KINDS: dict[str, tuple[Check, bytes, int, str | None]] = {
    "hint": (check_hint, b"1", MAX_RECORD_BYTES, None),
    "registry": (check_registry, b"me|0,1|2|3", MAX_RECORD_BYTES, "registry entry 'bad' is malformed"),
    "plans": (check_plans, PLAN_JSON, MAX_RECORD_BYTES, "a wave plan"),
    "plans-in-flight": (check_in_flight, PLAN_JSON, MAX_RECORD_BYTES, "a wave plan"),
    "knobs-values": (check_knobs_values, b'{"ring": 4}', MAX_RECORD_BYTES, None),
    "knobs-version": (check_knobs_version, b"7", MAX_RECORD_BYTES, None),
    "knob-history": (check_history, b'{"ring": 4}', MAX_RECORD_BYTES, None),
    "deployment": (check_deployment, b'{"block_size": 64, "num_stages": 2}', MAX_RECORD_BYTES, None),
    "status": (check_status, STATUS_JSON, MAX_RECORD_BYTES, "the status snapshot"),
    "run-meta": (check_run_meta, b'{"engine": "sim"}', MAX_RECORD_BYTES, "the description of run 'bad'"),
    "run-labels": (check_labels, b"a label", MAX_LABEL_BYTES, None),
    "spans": (check_spans, json.dumps(SPAN).encode(), MAX_SPAN_BYTES, None),
}
# Why a JSON record was refused, as the log line or note says it.
REASONS = {"not-utf8": "is not UTF-8", "nested": "is nested too deeply", "oversized": "over the limit of",
           "not-json": "is not JSON", "python": "is not JSON", "yaml": "is not JSON"}


T = TypeVar("T")


def on_store(url: str, redis_url: str, act: Callable[[RedisStore, redis.Redis], Awaitable[T]]) -> T:
    """``act(store, client)`` on a store at ``url`` and a raw client beside it (another writer), both
    closed after."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10)

    async def body() -> T:
        store = await RedisStore.connect(url)
        try:
            return await act(store, client)
        finally:
            await store.close()
    try:
        return asyncio.run(body())
    finally:
        client.close()



@pytest.mark.parametrize("payload_name", PAYLOADS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_foreign_entry_is_refused_never_run_and_never_crashes_the_reader(
        kind: str, payload_name: str, redis_url: str, redis_clusters: Callable[[], str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    check, valid, limit, logged = KINDS[kind]
    sentinel = tmp_path / "executed"
    payload = payloads(sentinel)[payload_name] or _padded(valid, limit)
    monkeypatch.setattr(redis_records, "_reported", set())        # each case gets its own first warning
    url = f"{redis_url}?cluster={redis_clusters()}"
    with caplog.at_level(logging.WARNING):
        on_store(url, redis_url, lambda store, client: check(store, client, store.url, payload))
    assert not sentinel.exists(), f"a reader of {kind} ran the {payload_name} payload"
    if logged is not None:
        lines = [r.getMessage() for r in caplog.records if r.name == "wavepp.store.redis_store"]
        assert any(logged in line and "ignored (written by another client?)" in line for line in lines), lines
        assert all("\n" not in line and len(line) < 300 for line in lines), lines      # one bounded line
        if kind != "registry" and payload_name in REASONS:
            assert any(REASONS[payload_name] in line for line in lines), lines


@pytest.mark.parametrize("entry", ["me|0|-1|1", "me|0|1e9|1", "me|0|" + "9" * 5000 + "|1", "me|0|１|1",
                                   "me|0|1", "me|0|1|1|1", "no fields"])
def test_a_registry_entry_is_counts_of_plain_digits_or_skipped(entry: str, redis_url: str,
                                                                redis_clusters: Callable[[], str]) -> None:
    """A sign, an exponent, an integer past 2^63 or full-width digits are no count of blocks."""
    url = f"{redis_url}?cluster={redis_clusters()}"
    on_store(url, redis_url, lambda store, client: check_registry(store, client, store.url, entry.encode()))


def test_oversized_knob_notes_say_why(redis_url: str, redis_clusters: Callable[[], str]) -> None:
    """The knobs record's note names the reason and the length, in one bounded line."""
    url = f"{redis_url}?cluster={redis_clusters()}"

    async def act(store: RedisStore, client: redis.Redis) -> str | None:
        client.hset(store.key("knobs"), mapping={"version": "3", "values": _padded(b'{"ring": 4}')})
        client.set(store.key("deployment"), b"[" * 100_000)
        return (await store.knobs_get()).note
    note = on_store(url, redis_url, act)
    assert note is not None and "\n" not in note and len(note) < 600, note
    assert f"which is {MAX_RECORD_BYTES + 1:,} bytes long, over the limit of {MAX_RECORD_BYTES:,}: " in note, note
    assert "the deployment record is nested too deeply" in note, note


def test_a_key_name_that_is_not_utf8_is_no_crash(redis_url: str, redis_clusters: Callable[[], str]) -> None:
    """Healing (it scans the deployment's key names) and clearing read names another client chose."""
    url = f"{redis_url}?cluster={redis_clusters()}"

    async def act(store: RedisStore, client: redis.Redis) -> None:
        client.set(store.key("hint", "stages").encode(), "not a set")          # makes the next update heal
        client.set(store.prefix.encode() + b":\xff\xfe", "x")
        await store.hint_update(0, [5], [])
        assert (await store.hint_lookup([[5]], [0]))[0].per_stage == (1,)
        assert await store.clear_all() == 3                 # the hint hash, its stage set, the foreign key
        assert client.keys(store.prefix.encode() + b":*") == []
    on_store(url, redis_url, act)
