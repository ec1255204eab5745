"""`import tarry` loads nothing but the facade; each public name loads its own layer when read.

Every check runs in a fresh interpreter: `sys.modules` of the test process already holds
everything. Instruction counts (against PocketFlow) are in benchmarks/test_import_cost.py.
"""

from __future__ import annotations

import subprocess
import sys

import tarry

#: What no program that only runs flows in memory should load: the front ends and their
#: libraries, the optional stores' drivers, telemetry, the provider SDKs, the executors.
FRONT_ENDS_AND_EXTRAS = (
    "argparse",
    "http.server",
    "starlette",
    "uvicorn",
    "rich",
    "psycopg",
    "psycopg_pool",
    "sqlite3",
    "opentelemetry",
    "prometheus_client",
    "openai",
    "anthropic",
    "asyncio",
    "concurrent.futures",
    "socket",
    "ssl",
    "logging",
    "dataclasses",
    "cattrs",
    "tarry.drivers.cli",
    "tarry.drivers.http",
    "tarry.drivers.batches",
    "tarry.snapshots.sqlite",
    "tarry.snapshots.postgres",
)

#: What `import tarry` alone must not load either: the libraries and layers a run needs, which
#: the first read of `tarry.Flow` or `tarry.Runtime` loads.
LOADED_ON_FIRST_USE = (
    "typing",
    "threading",
    "attr",
    "attrs",
    "msgpack",
    "datetime",
    "tarry.engine",
    "tarry.drivers",
    "tarry.snapshots",
)


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` a fresh interpreter has loaded after running `code`."""
    code += f"\nimport sys\nprint(' '.join(m for m in {names!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_import_tarry_loads_only_the_facade() -> None:
    assert _loaded_after("import tarry", FRONT_ENDS_AND_EXTRAS + LOADED_ON_FIRST_USE) == []


def test_a_first_run_in_memory_loads_no_front_end_store_driver_or_extra() -> None:
    code = (
        "from tarry import Flow, Runtime, step\n"
        "def hello(ctx):\n"
        "    return 1\n"
        "assert Runtime().run(Flow('f', [hello, step(hello, 'again')])).output == 1\n"
    )
    assert _loaded_after(code, FRONT_ENDS_AND_EXTRAS) == []


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    # Each name on its own, before anything else is loaded: no lazy name depends on another
    # having been read first.
    code = (
        "import sys, tarry\n"
        "for name in sys.argv[1:]:\n"
        "    value = getattr(tarry, name)\n"
        "    assert value is not None, name\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *tarry.__all__], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "ok"
    code = "from tarry import *\nimport tarry\nassert all(n in globals() for n in tarry.__all__)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lazy_names_are_listed_and_are_the_same_objects_as_their_homes() -> None:
    code = (
        "import tarry\n"
        "names = dir(tarry)\n"
        "assert set(tarry.__all__) <= set(names), set(tarry.__all__) - set(names)\n"
        "assert {'engine', 'drivers', 'snapshots', 'batches'} <= set(names)\n"
        "from tarry import Flow, Runtime, SQLiteStore\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    # SQLiteStore is not a name of tarry (it is tarry.snapshots'): the import fails as usual.
    assert "cannot import name 'SQLiteStore' from 'tarry'" in done.stderr
    code = (
        "import tarry\n"
        "from tarry.engine import Flow\n"
        "from tarry.drivers.runtime import Runtime\n"
        "assert tarry.Flow is Flow and tarry.Runtime is Runtime\n"
        "assert tarry.snapshots.SQLiteStore.__name__ == 'SQLiteStore'\n"
        "assert tarry.__version__\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_name_raises_attribute_error() -> None:
    try:
        tarry.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("tarry.NoSuchName resolved")


def test_the_default_runtime_and_module_level_run_load_on_first_call() -> None:
    code = (
        "import sys, tarry\n"
        "def hello(ctx):\n"
        "    return ctx.input + 1\n"
        "assert 'tarry.drivers.runtime' not in sys.modules\n"
        "assert tarry.run(tarry.Flow('f', [hello]), 1).output == 2\n"
        "assert tarry.default_runtime() is tarry.default_runtime()\n"
        "out = tarry.run(tarry.Flow('g', [tarry.Gate('ok')]))\n"
        "assert tarry.resume(out.token, True, flow=tarry.Flow('g', [tarry.Gate('ok')])).ok\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
