"""``make audit``: pip-audit of the installed dependencies (the pins of pyproject.toml and the
Makefile, and what the ranges resolved to), against PyPI's vulnerability data.

Exit 1 on a known vulnerability that IGNORED does not name. A service that cannot be reached,
or that knows nothing of the packages (a mirror without PyPI's per-release JSON answers 404,
and pip-audit then skips the package), is not a vulnerability: it is said in capitals, with
how many packages went unaudited, and the exit is 0, so an offline CI stays green without
pretending it audited anything (docs/security.md, "Dependencies").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

IGNORED: dict[str, str] = {}
"""Vulnerability id -> why it does not apply here (each also in docs/security.md)."""
TIMEOUT_S = 600


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "audit.json")
        argv = [sys.executable, "-m", "pip_audit", "--skip-editable", "--progress-spinner", "off",
                "--format", "json", "--output", report]
        for vuln in IGNORED:
            argv += ["--ignore-vuln", vuln]
        t0 = time.monotonic()
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"audit: NOT AUDITED: pip-audit did not finish in {TIMEOUT_S} s (the vulnerability service?)")
            return 0
        took = time.monotonic() - t0
        if not os.path.exists(report):
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"audit: NOT AUDITED: pip-audit failed (exit {run.returncode}): {last}")
            return 0
        with open(report, encoding="utf-8") as fh:
            deps = json.load(fh)["dependencies"]
    for vuln, why in IGNORED.items():
        print(f"audit: ignored {vuln}: {why}")
    found = [(d, v) for d in deps for v in d.get("vulns", [])]
    for dep, vuln in found:
        fixes = ", ".join(vuln.get("fix_versions") or []) or "none yet"
        print(f"audit: {dep['name']} {dep['version']}: {vuln['id']} (fixed in: {fixes})")
    skipped = [d for d in deps if d.get("skip_reason")]
    audited = len(deps) - len(skipped)
    if skipped:
        print(f"audit: {len(skipped)} of {len(deps)} packages NOT AUDITED, e.g. {skipped[0]['skip_reason']}")
    if audited == 0:
        print("audit: NOTHING AUDITED: the vulnerability service is unreachable from here or knows none "
              "of these packages (run `make audit` where pypi.org answers)")
    else:
        print(f"audit: {audited} packages audited in {took:.0f} s: {len(found)} known vulnerabilities")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
