"""Install the `bench` extra (the peers tarry is measured against) and record what happened.

    python benchmarks/install_peers.py STATUS.json

Installs the extra's requirements with pip, all at once, then one by one if that fails, so one
peer that cannot be installed does not take the others down with it. Then makes a virtualenv
of its own for each peer of `[tool.tarry.bench-venvs]` (.benchmarks/venvs/<peer>) and installs
its requirements there (test_peers.py measures it with that venv's Python). Writes, per peer,
whether it is installed, its version, and pip's last words when it failed: `report.py` prints
a line for every peer that is missing, so none is silently dropped. Exits 0 even when a peer
failed.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
import venv
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


VENVS = ROOT / ".benchmarks" / "venvs"


def bench_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["bench"])


def venv_peers() -> dict[str, list[str]]:
    """peer (its distribution) -> its requirements, each installed in a venv of its own."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(pyproject.get("tool", {}).get("tarry", {}).get("bench-venvs", {}))


def install_venv(peer: str, requirements: list[str]) -> dict[str, object]:
    """Make (or reuse) .benchmarks/venvs/<peer>, install the requirements, report the version."""
    path = VENVS / peer
    python = path / "bin" / "python"
    try:
        if not python.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(path)
    except Exception as exc:  # a venv that cannot be made is recorded, as a failed install
        return {"installed": False, "error": f"venv: {exc}", "venv": str(path)}
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *requirements],
        capture_output=True,
        text=True,
        check=False,
    )
    found = subprocess.run(
        [str(python), "-c", f"from importlib import metadata; print(metadata.version({peer!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or found.returncode != 0:
        error = (done.stderr or done.stdout or found.stderr).strip()[-500:]
        return {"installed": False, "error": error, "venv": str(path)}
    return {"installed": True, "version": found.stdout.strip(), "venv": str(path)}


def install_tarry_venv(requirements: list[str]) -> dict[str, object]:
    """.benchmarks/venvs/tarry: tarry built into a wheel and installed (not editable: an
    editable install adds its finder's imports to every fresh process), with the peers of the
    bench extra from PyPI, so that probes.py runs every system from a regular install. tarry
    is reinstalled every time: its version does not change with the code."""
    path = VENVS / "tarry"
    python = path / "bin" / "python"
    try:
        if not python.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(path)
    except Exception as exc:
        return {"installed": False, "error": f"venv: {exc}", "venv": str(path)}
    pip = [str(python), "-m", "pip", "install", "-q"]
    steps = [[*pip, str(ROOT), *requirements], [*pip, "--force-reinstall", "--no-deps", str(ROOT)]]
    for args in steps:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            error = (done.stderr or done.stdout).strip()[-500:]
            return {"installed": False, "error": error, "venv": str(path)}
    return {"installed": True, "venv": str(path), "editable": False}


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
    for peer, peer_requirements in venv_peers().items():
        status[peer] = install_venv(peer, peer_requirements)
        if not status[peer]["installed"]:
            print(
                f"install_peers: {peer} failed to install:\n{status[peer]['error']}",
                file=sys.stderr,
            )
    status["tarry (wheel)"] = install_tarry_venv(requirements)
    if not status["tarry (wheel)"]["installed"]:
        print(f"install_peers: tarry's wheel venv failed:\n{status['tarry (wheel)']['error']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(status, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
