"""The Autopilot page on a saved run whose autopilot applied a setting: the timeline, the judged apply and the
decision table, read from the run's own decision spans."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .test_app import run_page  # type: ignore[import-not-found]


def test_a_saved_autopilot_run_shows_its_apply_predicted_against_observed(tmp_path: Path,
                                                                            dashboard_env: None) -> None:
    path = tmp_path / "autopilot.json"
    done = subprocess.run([sys.executable, "-m", "wavepp", "bench", "--engine", "sim", "--model", "llama-3-8b",
                           "--hardware", "h200", "--workload", "reuse90", "--prompt-tokens", "4096", "--concurrency",
                           "32", "--requests", "2400", "--policy", "wavepp", "--ring", "1", "--autopilot", "on",
                           "--autopilot-window", "0.5", "--quiet", "--save-run", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "1 applied" in done.stdout
    at = run_page(f"run:{path}", "Autopilot")
    assert {m.label: m.value for m in at.metric}["applied"] == "1"
    assert at.get("plotly_chart"), "no timeline"
    judged, table = at.dataframe[0].value, at.dataframe[1].value
    assert list(judged["verdict"]) == ["kept"] and judged["observed"].iloc[0] > 1.0   # ring 1 -> 8+: > +100 %
    assert "apply" in set(table["action"])
