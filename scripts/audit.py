"""``make audit``: known vulnerabilities of the packages installed in this virtualenv (pip-audit).

    .venv/bin/python scripts/audit.py [--service pypi|osv]

pip-audit asks a vulnerability service about each installed release (PyPI's JSON API by default,
``/pypi/NAME/VERSION/json``; or OSV). Where that service cannot be reached, or answers for no
package (a mirror or proxy without that API: pip-audit then skips every package and still prints
"No known vulnerabilities found"), this says so in one line and exits 2 - an audit that audited
nothing is no pass. Otherwise it prints each vulnerable package with its advisories and fixed
versions and exits 1 when there is one, 0 when there is none. The project itself (installed
editable) is not on any index and is skipped. Never hangs: pip-audit runs under a time limit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REQUEST_TIMEOUT_S = 20          # pip-audit's own, per HTTP request
AUDIT_TIMEOUT_S = 600           # the whole audit (about 140 packages: ~10 s when the service answers)
NOT_FOUND = "Dependency not found"


def run_pip_audit(service: str) -> tuple[int, str, str]:
    binary = Path(sys.executable).parent / "pip-audit"
    if not binary.exists():
        raise SystemExit(f"make audit: {binary} is missing: install the dev extras (make test does, or "
                         f"pip install -e '.[dev]')")
    cmd = [str(binary), "--skip-editable", "--progress-spinner", "off", "--desc", "off", "--format", "json",
           "--vulnerability-service", service, "--timeout", str(REQUEST_TIMEOUT_S)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=AUDIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"make audit: the vulnerability service ({service}) did not answer within {AUDIT_TIMEOUT_S} s")
        raise SystemExit(2) from None
    return done.returncode, done.stdout, done.stderr


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def report(found: dict[str, Any], service: str) -> int:
    deps = found.get("dependencies", [])
    audited = [d for d in deps if "skip_reason" not in d]
    unknown = [d for d in deps if str(d.get("skip_reason", "")).startswith(NOT_FOUND)]
    if not audited:
        example = unknown[0]["skip_reason"] if unknown else "no installed package to audit"
        print(f"make audit: nothing audited: the vulnerability service ({service}) answered for none of the "
              f"{len(unknown)} installed packages (pip-audit: '{example}', and so for each) - no result, not a pass")
        return 2
    vulnerable = [d for d in audited if d.get("vulns")]
    for d in vulnerable:
        for v in d["vulns"]:
            fixes = ", ".join(v.get("fix_versions") or []) or "none yet"
            aliases = ", ".join(v.get("aliases") or [])
            print(f"{d['name']} {d['version']}: {v['id']}{f' ({aliases})' if aliases else ''}; fixed in {fixes}")
    count = sum(len(d["vulns"]) for d in vulnerable)
    skipped = f"; {len(unknown)} not known to the service" if unknown else ""
    print(f"make audit: {len(audited)} packages audited ({service}){skipped}: "
          f"{count} known vulnerabilities in {len(vulnerable)} packages")
    return 1 if vulnerable else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service", choices=("pypi", "osv"), default="pypi", help="the vulnerability service")
    args = parser.parse_args()
    rc, out, err = run_pip_audit(args.service)
    try:
        found = json.loads(out)            # printed with vulnerabilities (rc 1) as without (rc 0)
    except ValueError:
        print(f"make audit: cannot reach the vulnerability service ({args.service}): pip-audit exited {rc}: "
              f"{last_line(err)}")
        return 2
    return report(found, args.service)


if __name__ == "__main__":
    sys.exit(main())
