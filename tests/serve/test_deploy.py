"""compose.yaml and deploy/: validated by Debian's docker-compose (no container engine runs here), every
variable documented, the services wired to each other, and every Grafana query naming a metric a
running `wavepp serve` exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from wavepp.runtime.serve.config import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
SERVE_DOC = (ROOT / "docs" / "serve.md").read_text()     # the serve page owns the deployment
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "wavepp.json"
SERVICES = {"redis", "runtime", "dashboard", "otel-collector", "jaeger", "prometheus", "grafana"}


def docker_compose(*args: str, cwd: Path = ROOT, token: str | None = "t0ken") -> subprocess.CompletedProcess[str]:
    """``docker-compose ARGS`` with ``WAVEPP_ADMIN_TOKEN`` set to ``token`` (None: unset; it is required)."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose is not installed: `make services` installs Debian's package", pytrace=False)
    env = {k: v for k, v in os.environ.items() if k != "WAVEPP_ADMIN_TOKEN"}
    env |= {"WAVEPP_ADMIN_TOKEN": token} if token is not None else {}
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def test_docker_compose_validates_the_file_and_refuses_a_broken_copy(tmp_path: Path) -> None:
    done = docker_compose("-f", str(COMPOSE), "config", "-q")
    assert done.returncode == 0, done.stderr
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("condition: service_healthy", "condition: when_it_feels_like_it", 1))
    refused = docker_compose("-f", str(broken), "config", "-q", cwd=tmp_path)
    assert refused.returncode != 0 and "condition" in refused.stderr


def test_knob_writes_need_a_token_and_ports_are_published_on_loopback(tmp_path: Path) -> None:
    """compose published the API and the dashboard on every interface of the host, and PUT /v1/knobs
    needed no credentials. Now compose refuses to start without WAVEPP_ADMIN_TOKEN, hands it to the
    runtime and the dashboard, and publishes every port on 127.0.0.1 unless WAVEPP_PUBLISH_HOST says."""
    refused = docker_compose("-f", str(COMPOSE), "config", "-q", token=None)
    assert refused.returncode != 0 and "set WAVEPP_ADMIN_TOKEN" in refused.stderr
    done = docker_compose("-f", str(COMPOSE), "config", token="t0ken")
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name in ("runtime", "dashboard"):
        assert services[name]["environment"]["WAVEPP_ADMIN_TOKEN"] == "t0ken", name
    published = [(name, port) for name, service in services.items() for port in service.get("ports", [])]
    assert {name for name, _ in published} == {"runtime", "dashboard", "jaeger", "prometheus", "grafana"}
    for name, port in published:                     # docker-compose 1.29 prints "HOST:PUBLISHED:TARGET/tcp"
        assert str(port).startswith("127.0.0.1:"), (name, port)
    raw = yaml.safe_load(COMPOSE.read_text())["services"]
    assert all(p.startswith("${WAVEPP_PUBLISH_HOST:-127.0.0.1}:") for s in raw.values() for p in s.get("ports", []))


def test_the_services_are_wired_to_each_other() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == SERVICES
    runtime = services["runtime"]
    assert runtime["command"] == ["wavepp", "serve"] and runtime["build"] == "."
    env = runtime["environment"]
    assert env["WAVEPP_STORE"].startswith("redis://redis:6379/")
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert runtime["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/ready" in " ".join(runtime["healthcheck"]["test"])
    dashboard = services["dashboard"]["command"]
    assert dashboard[:3] == ["wavepp", "dashboard", "--store"] and dashboard[3].split("?")[0] == \
        env["WAVEPP_STORE"].split("?")[0]                 # the dashboard reads the runtime's store
    for name in ("redis", "runtime", "dashboard", "jaeger", "prometheus", "grafana"):
        assert "healthcheck" in services[name], name

    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    [exporter] = pipeline["exporters"]
    assert collector["exporters"][exporter]["endpoint"] == "jaeger:4317"
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    [job] = prometheus["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] == ["runtime:8000"]
    provisioned = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yaml").read_text())
    grafana_mounts = " ".join(services["grafana"]["volumes"])
    assert provisioned["providers"][0]["options"]["path"] in grafana_mounts


def test_every_variable_compose_sets_or_reads_is_documented() -> None:
    text = COMPOSE.read_text()
    compose = yaml.safe_load(text)
    body = "\n".join(line.split("#")[0] for line in text.splitlines())      # not the comments
    names = set(re.findall(r"\$\{([A-Z0-9_]+)", body))
    for service in compose["services"].values():
        env = service.get("environment") or {}
        names |= set(env) if isinstance(env, dict) else {e.split("=")[0] for e in env}
    known = {o.env for o in OPTIONS}
    for name in sorted(names):
        assert f"`{name}`" in SERVE_DOC, f"{name} is not documented in docs/serve.md"
        if name.startswith("WAVEPP_") and name in {e for s in compose["services"].values()
                                                   for e in (s.get("environment") or {})}:
            assert name in known, f"{name} is set for a service but `wavepp serve` does not read it"


def test_every_grafana_query_names_a_metric_the_runtime_exports(start_server: Callable[..., Any]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Busy fraction per stage", "Admission cadence (interval between admitting rounds)",
            "Prefill latency (arrival to last chunk)", "Tokens/s"} <= titles
    queried = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"\bwavepp_\w+", t["expr"])}
    assert len(queried) >= 10

    server = start_server("--engine", "sim", "--pp", "2", "--kv-blocks", "2000", "--time-scale", "0.05")
    for i in range(6):                        # enough for admission intervals, waves and latencies
        ids = [(i % 2) * 1000 + t for t in range(1024)]
        assert server.client.post("/v1/prefill", json={"token_ids": ids}).status_code == 200
    exposition = server.client.get("/metrics").text
    exported = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line.startswith("wavepp_")}
    missing = sorted(queried - exported)
    assert not missing, f"the dashboard queries metrics the runtime does not export: {missing}"
    assert server.stop() == 0, server.errors()


def test_the_serve_page_says_what_listens_where_and_how_to_lock_it_down() -> None:
    """One section names every listener (each service compose publishes among them), what a client
    of the API can do, what the admin token guards, and how to set it in compose and the stack."""
    start = SERVE_DOC.find("## What is exposed and how to lock it down")
    assert start >= 0, "docs/serve.md has no lock-down section"
    end = SERVE_DOC.find("\n## ", start + 1)
    section = SERVE_DOC[start:end if end >= 0 else len(SERVE_DOC)]
    published = {name for name, s in yaml.safe_load(COMPOSE.read_text())["services"].items() if s.get("ports")}
    words = {"runtime": "API", "dashboard": "dashboard", "grafana": "Grafana", "prometheus": "Prometheus",
             "jaeger": "Jaeger"}
    assert set(words) == published, "a published service is missing from this test's words"
    for needed in [*words.values(), "wavepp serve", "wavepp dashboard", "--metrics-port", "--launcher spawn",
                   "torchrun", "wavepp stack", "Redis", "`WAVEPP_ADMIN_TOKEN`", "`WAVEPP_PUBLISH_HOST`",
                   "Authorization: Bearer", "PUT /v1/knobs", "POST /v1/prefill", ".env", "redis://:***@",
                   "GLOO_SOCKET_IFNAME", "requirepass"]:
        assert needed in section, f"the lock-down section does not mention {needed}"
    assert len(section.splitlines()) < 60, "keep it short: the reference lives elsewhere"
