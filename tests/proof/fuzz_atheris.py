"""Coverage-guided fuzzing (atheris, libFuzzer) of the snapshot decoder and the token parser.

    .venv/bin/python tests/proof/fuzz_atheris.py {decoder,tokens} --runs N [--seed S]

fuzz.py --full runs both. tarry is instrumented, so libFuzzer steers its inputs towards new
branches of tarry's code. The oracles are those of fuzz.py: only a TarryError comes out, each
input within --timeout seconds (libFuzzer's -timeout; 2 s by default, not fuzz.TIME_LIMIT:
instrumented code is slower, and a slow input cannot be measured twice here) and 1 GiB of RSS,
and (tokens) nothing is accepted and the store is left as it was. A violation of a known bug
(fuzz.KNOWN) is printed once as `known bug <key>: ...` and fuzzing goes on; any other raises:
libFuzzer prints the traceback, writes the input to the crash file it names and exits non-zero.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["tarry"]):
    import tarry
    from tarry.snapshots.records import decode_event, decode_state, encode_state

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz  # noqa: E402  (the oracles, the sessions to aim at and the decoder corpus)

_reported: set[str] = set()


def guard(what: str, call: Any, given: Any) -> Any:
    """`call()`; a TarryError is a refusal (None), a known bug is reported once, anything else
    is a crash."""
    try:
        return call()
    except tarry.TarryError:
        return None
    except Exception as exc:
        violation = fuzz.Violation(
            "atheris", "-", f"{what} raised {fuzz.error_text(exc)}", fuzz.describe(given, 200)
        )
        key = fuzz.known_bug(violation)
        if key is None:
            raise
        if key not in _reported:
            _reported.add(key)
            print(
                f"known bug {key}: {violation.message} | {violation.input}",
                file=sys.stderr,
                flush=True,
            )
        return None


def test_decoder(data: bytes) -> None:
    """The first byte picks the decoder; a decoded state must encode again."""
    blob = data[1:]
    if data[:1] and data[0] & 1:
        guard("decode_event()", lambda: decode_event(blob, "s-atheris"), blob)
        return
    state = guard("decode_state()", lambda: decode_state(blob), blob)
    if state is not None:
        guard("encode_state() of a decoded state", lambda: encode_state(state), blob)


def test_planted(data: bytes) -> None:
    """A harness that fails on any input: shows a crash is reported (test_fuzz.py)."""
    msg = f"planted crash on {data[:8]!r}"
    raise ValueError(msg)


class Tokens:
    """Token-shaped input to resume, skip and cancel, over runtimes with and without a secret."""

    def __init__(self) -> None:
        self.pools = [
            fuzz.Pool(tarry.Runtime(flows=fuzz.FLOWS.values()), "memory"),
            fuzz.Pool(
                tarry.Runtime(flows=fuzz.FLOWS.values(), secret=fuzz.SECRET), "memory+secret"
            ),
        ]

    def __call__(self, data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        pool = self.pools[fdp.ConsumeIntInRange(0, len(self.pools) - 1)]
        method = ("resume", "skip", "cancel")[fdp.ConsumeIntInRange(0, 2)]
        mode = fdp.ConsumeIntInRange(0, 3)
        if mode == 0:
            given: Any = fdp.ConsumeUnicode(fdp.remaining_bytes())
        elif mode == 1:
            given = "tk_" + fdp.ConsumeUnicode(fdp.remaining_bytes())
        elif mode == 2:  # a live token with one char changed
            token = pool.live[fuzz.SITES[fdp.ConsumeIntInRange(0, len(fuzz.SITES) - 1)]].token
            at = fdp.ConsumeIntInRange(0, len(token) - 1)
            given = token[:at] + (fdp.ConsumeUnicode(1) or "A") + token[at + 1 :]
            if given == token:
                return
        else:
            given = fdp.ConsumeBytes(fdp.remaining_bytes())
        before = pool.image()
        what = f"{pool.label} {method}()"
        # guard gives None for a refusal (or a known bug), the outcome if it was accepted
        if guard(what, lambda: getattr(pool.rt, method)(given) or True, given) is not None:
            msg = f"{what} accepted a token it never issued: {given!r}"
            raise AssertionError(msg)
        if pool.image() != before:
            msg = f"{what} refused {given!r} but the store changed"
            raise AssertionError(msg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("harness", choices=["decoder", "tokens", "planted"])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=2, help="seconds one input may take")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tarry-atheris-") as tmp:
        corpus = Path(tmp, "corpus")
        corpus.mkdir()
        if args.harness == "decoder":
            for i, blob in enumerate(fuzz.corpus()):
                Path(corpus, f"state-{i}").write_bytes(b"\x00" + blob)
                Path(corpus, f"event-{i}").write_bytes(b"\x01" + blob)
            target: Any = test_decoder
        elif args.harness == "planted":
            Path(corpus, "seed").write_bytes(b"seed")
            target = test_planted
        else:
            rnd = random.Random(args.seed)
            for i in range(16):
                Path(corpus, f"seed-{i}").write_bytes(rnd.randbytes(48))
            target = Tokens()
        libfuzzer = [
            sys.argv[0],
            f"-runs={args.runs}",
            f"-seed={args.seed + 1}",
            f"-timeout={args.timeout}",
            "-rss_limit_mb=1024",
            "-max_len=4096",
            "-print_final_stats=1",
            f"-artifact_prefix={Path.cwd()}/atheris-{args.harness}-",
            str(corpus),
        ]
        atheris.Setup(libfuzzer, target)
        atheris.Fuzz()


if __name__ == "__main__":
    main()
