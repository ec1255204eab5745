"""The `tarry` command's edges: `--version`, store URLs (SQLAlchemy's slashes, stores that
cannot be opened, read-only commands that must not create one), the CLI's spelling of the
Python API's advice, and shell completion.

Mostly in this process (`main(argv)`); through the console script where the way out of a
process (exit code, no traceback) is the point.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from tarry import Flow, Gate, Runtime
from tarry.drivers.cli import build_parser, main
from tarry.drivers.cli.completion import SHELLS, _commands

TARRY = str(Path(sys.executable).parent / "tarry")

V1 = """
from tarry import Flow, Gate

job = Flow("job", [Gate("ok"), lambda ctx: "v1"])
"""

V2 = """
from tarry import Flow, Gate

job = Flow("job", [Gate("ok"), Gate("again"), lambda ctx: "v2"])
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty current folder with two versions of a flow module, and no $TARRY_STORE."""
    (tmp_path / "jobs.py").write_text(textwrap.dedent(V1))
    (tmp_path / "jobs_v2.py").write_text(textwrap.dedent(V2))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("TARRY_STORE", raising=False)
    for name in ("jobs", "jobs_v2"):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in ("jobs", "jobs_v2"):
        sys.modules.pop(name, None)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own exits
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TARRY, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


# --- version ---------------------------------------------------------------------------------


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    done = process("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == f"tarry {version('tarry')}\n"
    assert not (tmp_path / "tarry.db").exists()


# --- store URLs ------------------------------------------------------------------------------


def test_sqlite_urls_are_relative_with_three_slashes_and_absolute_with_four(
    here: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "run", "jobs:job", "--store", "sqlite:///rel.db")[0] == 3
    assert (here / "rel.db").exists()
    elsewhere = tmp_path_factory.mktemp("abs") / "abs.db"
    assert str(elsewhere).startswith("/")
    assert cli(capsys, "run", "jobs:job", "--store", f"sqlite:///{elsewhere}")[0] == 3
    assert elsewhere.exists()  # sqlite:////tmp/...: four slashes, an absolute path
    code, out, _ = cli(capsys, "ls", "--json", "--store", f"sqlite:///{elsewhere}")
    assert code == 0 and len(json.loads(out)) == 1


def test_a_store_that_cannot_be_opened_is_one_clear_line(here: Path) -> None:
    # The case: meant as /tmp/x.db, read as ./tmp/x.db, whose folder is not there.
    done = process("run", "jobs:job", "--store", "sqlite:///tmp/x.db", cwd=here)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("tarry: cannot open the SQLite store 'sqlite:///tmp/x.db'")
    assert f"(the file {here}/tmp/x.db)" in done.stderr
    assert "an absolute one takes four slashes, sqlite:////tmp/x.db" in done.stderr
    done = process("run", "jobs:job", "--store", "sqlite:///no/such/folder/x.db", cwd=here)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot open the SQLite store" in done.stderr and "four slashes" not in done.stderr

    (here / "junk.db").write_bytes(b"this is no database" * 100)
    done = process("ls", "--store", "sqlite:///junk.db", cwd=here)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot open the SQLite store 'sqlite:///junk.db'" in done.stderr
    assert "not a database" in done.stderr

    done = process("ls", "--store", "postgresql://tarry:tarry@127.0.0.1:1/tarry", cwd=here)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "cannot open the store 'postgresql://tarry:tarry@127.0.0.1:1/tarry'" in done.stderr


def test_the_runtime_refuses_a_sqlite_file_it_cannot_open_with_a_typed_error(
    here: Path,
) -> None:
    import tarry

    with pytest.raises(tarry.InvalidArgument, match="cannot open the SQLite store") as caught:
        Runtime(store="sqlite:///no/such/folder/x.db")
    assert isinstance(caught.value, ValueError)
    assert not (here / "no").exists()


READ_ONLY = [
    (["ls"], ""),
    (["stats"], ""),
    (["due"], ""),
    (["prune", "--older-than", "7d"], ""),
    (["show", "s-1"], "no session 's-1': "),
    (["events", "s-1"], "no session 's-1': "),
    (["abort", "s-1"], "no session 's-1': "),
    (["cancel", "s-1"], "no session or token 's-1': "),
    (["resume", "tk_nope"], "unknown resume token: "),
    (["skip", "tk_nope"], "unknown resume token: "),
    (["mail", "ls"], ""),
    (["mail", "discard", "batch-7/item-1"], ""),
]


@pytest.mark.parametrize(("args", "what"), READ_ONLY)
def test_commands_that_need_sessions_never_create_the_store(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], what: str
) -> None:
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert err == (
        f"tarry: {what}no store at {here / 'tarry.db'} (sqlite:///tarry.db): nothing has run "
        f"with it yet; name another with --store or $TARRY_STORE\n"
    )
    assert list(here.glob("tarry.db*")) == []


def test_a_relative_url_meant_as_absolute_gets_the_four_slashes_hint(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{here / 'runs.db'}"
    Runtime(store=url).run(Flow("f", [Gate("g")]))
    code, _, err = cli(capsys, "ls", "--store", f"sqlite:///{str(here / 'runs.db')[1:]}")
    assert code == 2 and "no store at" in err and f"sqlite:///{here}/runs.db" in err


def test_commands_that_create_the_store_still_do(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "deliver", "job-1", "--value", "1")[0] == 0
    assert (here / "tarry.db").exists()
    assert cli(capsys, "ls")[0] == 0


# --- the CLI's spelling of the API's advice ----------------------------------------------------


def test_a_refused_repair_names_the_cli_option(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "run", "jobs:job", "--json")
    token = json.loads(out)["token"]
    code, _, err = cli(capsys, "resume", token, "--value", "true", "--flow", "jobs_v2:job")
    assert code == 2 and "--allow-changed" in err and "allow_changed=True" not in err
    # Nothing was used: the repair goes through with the option.
    code, out, _ = cli(
        capsys,
        "resume",
        token,
        "--value",
        "true",
        "--flow",
        "jobs_v2:job",
        "--allow-changed",
        "--json",
    )
    assert code == 3 and json.loads(out)["pause"]["path"] == ["again"]


def test_an_unknown_flow_names_the_cli_option(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = Runtime(store="sqlite:///tarry.db").run(Flow("from-python", [Gate("g")]))
    code, _, err = cli(capsys, "resume", out.token, "--value", "true")
    assert code == 2 and "pass --flow MODULE:FLOW" in err and "flow=" not in err


# --- completion ------------------------------------------------------------------------------


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers for `words` (the last one being typed) with `script` loaded."""
    line = " ".join(words)
    code = (
        f"{script}\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
        f"_tarry; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_commands_options_and_choices(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, script, _ = cli(capsys, "completion", "bash")
    assert code == 0
    _, commands = _commands(build_parser())
    names = [c.name for c in commands]
    assert {"run", "resume", "ls", "completion", "db"} <= set(names)
    offered = _complete(script, "tarry", "''")
    assert set(offered) == {"-h", "--help", "--store", "--version", *names}
    assert _complete(script, "tarry", "res") == ["resume"]
    assert sorted(_complete(script, "tarry", "re")) == ["recover", "resume"]
    assert _complete(script, "tarry", "--store", "x.db", "lo") == ["logs"]
    assert "--allow-changed" in _complete(script, "tarry", "resume", "--")
    assert _complete(script, "tarry", "run", "--durability", "''") == ["pause", "step"]
    assert _complete(script, "tarry", "db", "''")[-1] == "upgrade"
    assert set(_complete(script, "tarry", "completion", "''")) >= set(SHELLS)
    assert _complete(script, "tarry", "run", "--input", "''") == []  # a value: files
    assert list(here.glob("tarry.db*")) == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_the_options_of_a_commands_sub_commands(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, script, _ = cli(capsys, "completion", "bash")
    assert "mail" in _complete(script, "tarry", "''")
    assert _complete(script, "tarry", "ma") == ["mail"]
    assert {"ls", "discard"} <= set(_complete(script, "tarry", "mail", "''"))
    assert {"--prefix", "--limit", "--json", "--store"} <= set(
        _complete(script, "tarry", "mail", "ls", "--")
    )
    # Each sub-command its own options: not those of `tarry ls`, nor of its sibling.
    assert "--status" not in _complete(script, "tarry", "mail", "ls", "--")
    assert "--prefix" not in _complete(script, "tarry", "mail", "discard", "--")
    assert "--json" in _complete(script, "tarry", "--store", "x.db", "mail", "discard", "--")
    assert _complete(script, "tarry", "mail", "ls", "--prefix", "''") == []  # a value
    assert "--status" in _complete(script, "tarry", "ls", "--")
    assert "--store" in _complete(script, "tarry", "db", "upgrade", "--")


@pytest.mark.parametrize("shell", SHELLS)
def test_every_script_names_every_command_and_option(
    here: Path, capsys: pytest.CaptureFixture[str], shell: str
) -> None:
    code, script, _ = cli(capsys, "completion", shell)
    assert code == 0 and script.endswith("\n")
    top, commands = _commands(build_parser())
    nested = [sub for command in commands for sub in command.subcommands]
    assert {"mail ls", "mail discard", "db upgrade"} <= {c.name for c in nested}
    for command in commands + nested:
        assert all(word in script for word in command.name.split()), command.name
        for option in command.options:
            for name in option.names:
                flag = name.lstrip("-") if shell == "fish" else name
                assert flag in script, (command.name, name)
    for option in top.options:
        assert option.names[-1].lstrip("-") in script
    if shell == "bash":
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    elif shutil.which(shell):
        subprocess.run([shell, "-n"], input=script, text=True, check=True)
