"""Install the `bench` extra (the peers tarry is measured against) and record what happened.

    python benchmarks/install_peers.py STATUS.json

Installs the extra's requirements with pip, all at once, then one by one if that fails, so one
peer that cannot be installed does not take the others down with it. Writes, per peer, whether
it is installed, its version, and pip's last words when it failed: `report.py` prints a line
for every peer that is missing, so none is silently dropped. Exits 0 even when a peer failed.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["bench"])


def dist_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]


def pip_install(*requirements: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", *requirements],
        capture_output=True,
        text=True,
        check=False,
    )


def main(out: Path) -> None:
    requirements = bench_requirements()
    errors: dict[str, str] = {}
    done = pip_install(*requirements)
    if done.returncode != 0:
        for requirement in requirements:
            one = pip_install(requirement)
            if one.returncode != 0:
                errors[dist_name(requirement)] = (one.stderr or one.stdout).strip()[-500:]
    importlib.invalidate_caches()
    status = {}
    for requirement in requirements:
        name = dist_name(requirement)
        try:
            status[name] = {"installed": True, "version": metadata.version(name)}
        except metadata.PackageNotFoundError:
            error = errors.get(name, (done.stderr or done.stdout).strip()[-500:])
            status[name] = {"installed": False, "error": error}
            print(f"install_peers: {name} failed to install:\n{error}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(status, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
