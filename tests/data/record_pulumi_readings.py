"""Re-record `pulumi_readings.json`: how the real Pulumi CLI reads each plain scalar spelling of a stack file.

Run with a `pulumi` on PATH (or PULUMI=/path/to/pulumi): `python tests/data/record_pulumi_readings.py`.
For each spelling it writes a scratch stack file holding it at the top level (`ascend-fleet:top`) and inside
an object (`ascend-fleet:nested: {env: {A: ...}}`, where env values, args, names and addresses sit), runs
`pulumi config --json` with a local file backend, and records the `"value"` text the CLI would pass to the
program (or the CLI's error). It never builds pulumi; the CLI's version goes into the file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SPELLINGS = [
    "1.0", "1.", "1.5", "0.90", "-0.0", "1e3", "1E3", "1e16", "1e21", "1e-7", "1e400", "0X1F", "0x1F", "0B101",
    "0b101", "0O17", "0o17", "017", "08", "1_000", "+1", "-0", "9007199254740993", "9223372036854775807",
    "9223372036854775808", "18446744073709551616", ".5", ".inf", "-.inf", ".nan", "2001-1-1", "2001-01-01",
    "2001-1-1T1:2:3Z", "2024-6-1", "=", "yes", "on", "y", "~", "true", "True", "1:30", "!!binary aGVsbG8=",
    "!!set {a, b}", "!!str 1.0", "!!float 1",
]  # fmt: skip
OUT = Path(__file__).with_name("pulumi_readings.json")


def _value(run: subprocess.CompletedProcess[str], key: str) -> dict[str, str]:
    if run.returncode != 0:
        return {"error": " ".join(run.stderr.split())}
    return {"value": json.loads(run.stdout)[f"ascend-fleet:{key}"]["value"]}


def main() -> None:
    pulumi = os.environ.get("PULUMI") or shutil.which("pulumi")
    if pulumi is None:
        sys.exit("no pulumi CLI: put it on PATH or set PULUMI=/path/to/pulumi")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PULUMI_BACKEND_URL": f"file://{tmp}", "PULUMI_CONFIG_PASSPHRASE": "x",
               "PULUMI_SKIP_UPDATE_CHECK": "1"}  # fmt: skip
        project = Path(tmp, "project")
        project.mkdir()
        (project / "Pulumi.yaml").write_text("name: ascend-fleet\nruntime: python\n")
        subprocess.run([pulumi, "stack", "init", "ref", "--non-interactive"], cwd=project, env=env, check=True,
                       capture_output=True)  # fmt: skip
        version = subprocess.run([pulumi, "version"], env=env, check=True, capture_output=True, text=True).stdout
        readings = []
        for spelling in SPELLINGS:
            reading = {"spelling": spelling}
            for key, line in (("top", f"ascend-fleet:top: {spelling}"), ("nested", f"ascend-fleet:nested: {{env: {{A: {spelling}}}}}")):
                (project / "Pulumi.ref.yaml").write_text(f"config:\n  {line}\n")
                run = subprocess.run([pulumi, "config", "--json"], cwd=project, env=env, capture_output=True, text=True)
                reading[key] = _value(run, key)
            readings.append(reading)
    OUT.write_text(json.dumps({"pulumi": version.strip(), "readings": readings}, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
