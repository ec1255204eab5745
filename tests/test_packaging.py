"""Packaging: every layer folder ships, generic names do not leak, `__all__` is pinned."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tarry

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "facade": "tarry",
    "engine": "tarry.engine",
    "drivers": "tarry.drivers",
    "snapshots": "tarry.snapshots",
}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_layer_subfolder_is_listed_in_packages() -> None:
    config = _config()
    packages, dirs = set(config["packages"]), config["package-dir"]
    for folder, package in LAYERS.items():
        for sub in [ROOT / folder, *sorted((ROOT / folder).rglob("*/"))]:
            if not sub.is_dir() or sub.name == "__pycache__" or not any(sub.glob("*.py")):
                continue
            rel = sub.relative_to(ROOT / folder).parts
            name = ".".join((package, *rel))
            assert name in packages, f"{sub} holds code but {name!r} is not in packages"
            assert dirs[name] == "/".join((folder, *rel))


def test_the_installed_package_is_what_is_tested() -> None:
    assert Path(tarry.__file__).parent.name == "facade"
    assert str(ROOT) not in sys.path


@pytest.mark.parametrize("name", ["engine", "drivers", "snapshots", "facade"])
def test_generic_names_are_not_importable_at_top_level(name: str) -> None:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is not None)"
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True)
    assert result.returncode == 0, f"{name!r} is importable at top level"


PUBLIC = {
    "NOT_READY",
    "AsyncInSyncContext",
    "Branch",
    "Child",
    "ChildFailed",
    "ConcurrentUpdate",
    "ContainerFrame",
    "Context",
    "Delivery",
    "ErrorInfo",
    "Event",
    "Flow",
    "FlowMismatch",
    "ForEach",
    "Gate",
    "Graph",
    "InvalidFlow",
    "InvalidResumeValue",
    "Loop",
    "MailInfo",
    "ManualClock",
    "Parallel",
    "NotSerializable",
    "Outcome",
    "PauseInfo",
    "ResumeRequest",
    "Retry",
    "Route",
    "Runtime",
    "SessionExists",
    "SessionNotResumable",
    "SessionState",
    "SessionSummary",
    "SessionView",
    "Sleep",
    "SnapshotError",
    "TarryError",
    "TokenAlreadyUsed",
    "UnknownFlow",
    "UnknownRoute",
    "UnknownSession",
    "UnknownToken",
    "Wait",
    "default_runtime",
    "resume",
    "run",
    "step",
    # time and failure
    "InvalidArgument",
    "NodeStats",
    "Stats",
    "export_events",
    # bounds
    "PayloadTooLarge",
    "SnapshotTooLarge",
    # tokens fail closed
    "SecretRequired",
    # logs captured from steps
    "LogRecord",
    # provider batch APIs (tarry.batches)
    "BatchRequest",
    "BatchItemFailed",
    "InvalidBatchRequest",
    # where sync steps run (Runtime(executor=...))
    "NotSendable",
}


def test_public_all_is_pinned() -> None:
    assert set(tarry.__all__) == PUBLIC
    for name in tarry.__all__:
        assert getattr(tarry, name) is not None


def test_snapshots_all_is_pinned() -> None:
    snapshots = importlib.import_module("tarry.snapshots")
    assert set(snapshots.__all__) == {
        "MemoryStore",
        "SQLiteStore",
        "SessionRecord",
        "SessionStore",
        "TokenInfo",
        "WaitRecord",
        "check",
        "dumps",
        "loads",
        "register",
    }


def test_batches_all_is_pinned() -> None:
    batches = importlib.import_module("tarry.batches")
    assert set(batches.__all__) == {
        "AnthropicBatch",
        "BatchAdapter",
        "BatchItemFailed",
        "BatchRecord",
        "BatchRequest",
        "BatchStatus",
        "InvalidBatchRequest",
        "OpenAIBatch",
    }
    assert batches.BatchRequest is tarry.BatchRequest


def test_errors_are_tarry_errors() -> None:
    for name in tarry.__all__:
        obj = getattr(tarry, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tarry.TarryError), name


def test_import_tarry_loads_no_store_codec_library_or_json() -> None:
    """`import tarry` stays quick: the stores, cattrs and the JSON form load on first use, and
    what only some runs need (logging, jitter, tracebacks, signed tokens, decimals) too."""
    heavy = [
        "cattrs",
        "sqlite3",
        "json",
        "socket",
        "asyncio",
        "tarry.snapshots.memory.store",
        "tarry.snapshots.sqlite.store",
        "tarry.drivers.reading.jsonable",
        "psycopg",
        "logging",
        "random",
        "traceback",
        "hmac",
        "secrets",
        "decimal",
    ]
    code = f"import sys, tarry; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    # A process that only resumes a session decodes its snapshot without cattrs.
    code = (
        "import sys, tarry\n"
        "rt = tarry.Runtime()\n"
        "out = rt.run(tarry.Flow('f', [tarry.Gate('g')]))\n"
        "rt.resume(out.token, True)\n"
        "print('cattrs' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    code = "import tarry; print(tarry.export_events.__module__, tarry.snapshots.SQLiteStore)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "tarry.drivers.reading.jsonable" in done.stdout and "SQLiteStore" in done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of what the sdist is made of (the build's
    own files stay out of the work tree)."""
    import shutil

    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for folder in LAYERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    for build in ("build_sdist", "build_wheel"):  # one process each, as a build frontend does
        code = f"import sys, setuptools.build_meta as b; b.{build}(sys.argv[1])"
        subprocess.run(
            [sys.executable, "-c", code, str(out)], cwd=src, check=True, capture_output=True
        )
    return out


def test_the_wheel_ships_the_py_typed_marker(built: Path) -> None:
    import zipfile

    (wheel,) = built.glob("tarry-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert "tarry/py.typed" in names  # PEP 561: covers tarry.engine, .drivers, .snapshots
    assert "tarry/engine/__init__.py" in names and "tarry/drivers/runtime.py" in names
    assert any(n.startswith("tarry-") and n.endswith("/LICENSE") for n in names)


def test_the_sdist_ships_the_license_and_the_marker(built: Path) -> None:
    import tarfile

    (sdist,) = built.glob("tarry-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"LICENSE", "facade/py.typed", "pyproject.toml"} <= names


def test_the_license_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def _modules_after(code: str) -> set[str]:
    """The modules a fresh process has loaded after running `code`."""
    code += "\nimport sys; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


#: What `import tarry` must not load: the front ends and their libraries, OpenSSL (hashlib), the
#: dataclass machinery, base64, and the Runtime's families that a plain run or resume never calls.
NOT_AT_IMPORT = {
    "starlette",
    "uvicorn",
    "rich",
    "tarry.drivers.cli",
    "tarry.drivers.http",
    "hashlib",
    "_hashlib",
    "dataclasses",
    "tarry.drivers.sessions.batch",
    "tarry.drivers.sessions.control",
    "tarry.drivers.rounds.delivering",
    "tarry.drivers.reading.inspecting",
    "tarry.drivers.rounds.polling",
    "tarry.drivers.rounds.pruning",
    "tarry.drivers.rounds.recovery",
    "tarry.drivers.rounds.timers",
    "tarry.drivers.reading.stats",
    "base64",
}


def test_import_tarry_loads_no_front_end_openssl_or_rare_family() -> None:
    assert _modules_after("import tarry") & NOT_AT_IMPORT == set()


def test_fresh_resume_from_sqlite_loads_no_rare_family(tmp_path) -> None:
    """A process that only resumes a token from SQLite loads neither the front ends nor the
    families it does not call (timers, delivery, control, inspection, stats)."""
    flow = "tarry.Flow('f', [tarry.Gate('g'), tarry.Gate('h')])"
    url = f"sqlite:///{tmp_path / 'x.db'}"
    rt = tarry.Runtime(store=url)
    token = rt.run(eval(flow, {"tarry": tarry})).token
    code = (
        "import tarry\n"
        f"rt = tarry.Runtime(store={url!r}, flows=[{flow}])\n"
        f"assert rt.resume({token!r}, True).paused\n"
    )
    assert _modules_after(code) & NOT_AT_IMPORT == set()


def test_lazy_names_import_list_and_work() -> None:
    """The names `import tarry` leaves for later are still in `dir(tarry)` before first use, and
    `from tarry import ...` and the Runtime's families work once loaded."""
    code = (
        "import tarry\n"
        "names = dir(tarry)\n"
        "assert {'Stats', 'NodeStats', 'export_events'} <= set(names), names\n"
        "from tarry import NodeStats, Stats, export_events\n"
        "from tarry.drivers.reading.stats import Stats as S\n"
        "assert Stats is S and NodeStats.__module__ == 'tarry.drivers.reading.stats'\n"
        "rt = tarry.Runtime()\n"
        "out = rt.run(tarry.Flow('f', [tarry.Wait('w', key='k')]))\n"
        "assert [o.output for o in rt.deliver('k', 1)] == [1]\n"
        "assert isinstance(rt.stats(), Stats) and rt.sessions()[0].status == 'completed'\n"
    )
    loaded = _modules_after(code)
    assert {"tarry.drivers.reading.stats", "tarry.drivers.rounds.delivering"} <= loaded
