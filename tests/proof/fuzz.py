"""Fuzzing campaign: hostile input gives only TarryError or 4xx, in bounded time and memory.

Four targets: the snapshot decoder (`decode_state`, `decode_event`), the token parser
(`resume`/`skip`/`cancel` given anything as a token), resume values (anything handed to a
session paused at a Gate, a Wait, `ctx.interrupt`, a Wait inside a ForEach, or to `skip`), and
the HTTP API's POST bodies. The oracles: only a TarryError (or a 2xx/4xx answer whose body is
strict JSON) comes out; each input takes under TIME_LIMIT and under MEMORY_LIMIT of traced
memory; a refusal leaves the store exactly as it was (every record, event and token).

    .venv/bin/python tests/proof/fuzz.py --json OUT.json [--seed N] [--full] [--target NAME]

Inputs come from seeded hypothesis strategies. Generating an example costs hypothesis several
milliseconds, far more than trying it, so each example fans out into a few inputs: random
mutations drawn from a generator hypothesis seeds (decoder, tokens), or the same value at every
site and the same body at every route (values, HTTP). A seed, a budget and a trial number
`example.variant` name one input, and every failure example shows the input too.

Violations are collected, not raised: one run counts every failing input. Those of bugs already
known, each pinned by a strict xfail test in test_fuzz.py, are counted apart from new ones.
With --full, atheris (coverage-guided) also runs on the decoder and the token parser when it is
installed (fuzz_atheris.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import enum
import importlib.metadata
import importlib.util
import json
import math
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import msgpack
import tarry
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from tarry import Flow, ForEach, Gate, Runtime, TarryError, Wait
from tarry.snapshots import dumps, loads, register
from tarry.snapshots.records import decode_event, decode_state, encode_event, encode_state

NAME = "fuzz"
TARGETS = ("decoder", "tokens", "values", "http")
#: Inputs per target: the slice `make test` runs, and the `make proof` size.
QUICK_BUDGET = 200
FULL_BUDGET = 20_000
#: Inputs per hypothesis example (see the module docstring).
FANOUT = {"decoder": 16, "tokens": 8, "values": 5, "http": 5}
#: atheris executions per harness with --full.
ATHERIS_RUNS = 150_000
#: The bounds every input must keep. A pure call (a decode) that is too slow is measured once
#: more before it counts, so a scheduling hiccup on a busy machine is not reported.
TIME_LIMIT = 1.0
MEMORY_LIMIT = 64 * 2**20
#: Past this, the watchdog interrupts the input: a hang must not stall the whole campaign.
HANG_LIMIT = 10.0
MAX_EXAMPLES = 5

HERE = Path(__file__).resolve().parent

# --- bugs already known --------------------------------------------------------------------------


@attrs.frozen
class Known:
    """A known bug: violations whose text (message and input) matches `pattern`."""

    key: str
    pattern: str
    test: str  # the strict xfail test in test_fuzz.py that pins it


KNOWN: tuple[Known, ...] = ()


def known_bug(violation: Violation) -> str | None:
    text = f"{violation.message} {violation.input}"
    return next((k.key for k in KNOWN if re.search(k.pattern, text, re.S)), None)


# --- the oracle core -----------------------------------------------------------------------------


class Hang(BaseException):
    """Raised in the main thread by the watchdog (a BaseException: tarry's `except Exception`
    around user code must not swallow it)."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Interrupt the main thread with Hang after `seconds` (no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Python's default recursion limit, and the depth of stack a caller of tarry is assumed to
#: call it from.
RECURSION_LIMIT = 1000
CALLER_DEPTH = 30


@contextlib.contextmanager
def caller_recursion_limit() -> Iterator[None]:
    """Hypothesis raises the recursion limit to about 2,000 while it runs a test: put back what
    a caller of tarry has (the default limit, CALLER_DEPTH frames already used), or inputs
    that make tarry recurse too deep would pass here and fail in production."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + RECURSION_LIMIT - CALLER_DEPTH)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


@attrs.frozen
class Probe:
    """How one call ended: its value or the exception it raised, its time and peak memory."""

    value: Any
    error: BaseException | None
    seconds: float  # CPU seconds of this process (see `probe`)
    peak: int  # bytes allocated and still held at the worst moment of the call


def probe(call: Callable[[], Any], hang: float = HANG_LIMIT) -> Probe:
    """Run `call` once. Memory is traced around the call only: tracing everything (hypothesis
    too) would slow the campaign fourfold. Its time is the CPU time of this process, not the
    wall clock: the bound is on the work a call does, which a machine loaded by other work
    (CI's shared runners) does not change; a call that hangs is caught by the watchdog."""
    own = not tracemalloc.is_tracing()
    base = 0
    if own:
        tracemalloc.start()
    else:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    value, error = None, None
    try:
        start = time.process_time()
        with watchdog(hang), caller_recursion_limit():
            try:
                value = call()
            except (Exception, Hang) as exc:
                error = exc
        seconds = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if own:
            tracemalloc.stop()
    return Probe(value, error, seconds, max(peak, 0))


def describe(value: Any, limit: int = 240) -> str:
    """A short repr that never fails (huge ints, deep nesting) and never floods a report."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__}, repr failed: {type(exc).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {describe(str(exc), 160)[1:-1]}"


@attrs.frozen
class Violation:
    target: str
    trial: str  # "example.variant"
    message: str
    input: str


@attrs.define
class Tally:
    """What one target saw: inputs, how each call ended, worst time and memory, violations."""

    target: str
    seed: int
    budget: int
    time_limit: float = TIME_LIMIT
    memory_limit: int = MEMORY_LIMIT
    inputs: int = 0
    calls: int = 0
    ends: collections.Counter[str] = attrs.field(factory=collections.Counter)
    slowest: float = 0.0
    peak: int = 0
    violations: list[Violation] = attrs.field(factory=list)

    def fail(self, trial: str, message: str, given: Any) -> None:
        self.violations.append(Violation(self.target, trial, message, describe(given, 400)))

    def call(
        self,
        trial: str,
        what: str,
        fn: Callable[[], Any],
        given: Any,
        *,
        allowed: tuple[type[BaseException], ...] = (TarryError,),
        pure: bool = False,
    ) -> Probe:
        """Run `fn` once under the time and memory bounds; record a violation when it raises
        anything but `allowed` or breaks a bound. A `pure` call is measured again before a slow
        run counts (a call that changes the store cannot be repeated)."""
        got = probe(fn)
        if got.seconds > self.time_limit and pure:
            again = probe(fn)
            got = attrs.evolve(got, seconds=min(got.seconds, again.seconds))
        self.calls += 1
        self.slowest = max(self.slowest, got.seconds)
        self.peak = max(self.peak, got.peak)
        if got.error is None:
            self.ends["returned"] += 1
        else:
            self.ends[type(got.error).__name__] += 1
            if not isinstance(got.error, allowed):
                self.fail(trial, f"{what} raised {error_text(got.error)}", given)
        if got.seconds > self.time_limit:
            self.fail(trial, f"{what} took {got.seconds:.3f} s (limit {self.time_limit} s)", given)
        if got.peak > self.memory_limit:
            self.fail(
                trial,
                f"{what} used {got.peak / 2**20:.1f} MiB (limit {self.memory_limit / 2**20:g} MiB)",
                given,
            )
        return got

    def figures(self) -> dict[str, Any]:
        t = self.target
        ends = ", ".join(f"{name} {n}" for name, n in self.ends.most_common())
        return {
            f"{t}_inputs": self.inputs,
            f"{t}_calls": self.calls,
            f"{t}_outcomes": ends,
            f"{t}_slowest_ms": round(self.slowest * 1000, 2),
            f"{t}_peak_traced_mib": round(self.peak / 2**20, 2),
            f"{t}_failures": len(self.violations),
        }


def drive(
    strategy: st.SearchStrategy[Any], tally: Tally, body: Callable[[int, Any, random.Random], None]
) -> None:
    """Call `body(example_number, example, rnd)` until the tally has its budget of inputs,
    seeded. Nothing is raised back to hypothesis, so it neither stops at the first violation
    nor shrinks; `rnd` is a generator hypothesis seeds, for cheap variants of the example."""
    examples = iter(range(10**9))
    fanout = FANOUT.get(tally.target, 1)

    @hypothesis_seed(tally.seed)
    @settings(
        max_examples=max(1, -(-tally.budget // fanout)),
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(strategy, st.randoms(use_true_random=True))
    def run(example: Any, rnd: random.Random) -> None:
        body(next(examples), example, rnd)

    run()


# --- values: the strategies ----------------------------------------------------------------------


@register
@attrs.frozen
class Parcel:
    """A registered record: encodable."""

    label: str
    weight: Any = None


@register
class Hue(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Stranger:
    """Never registered: not encodable."""

    a: int = 1


class Mood(enum.Enum):  # never registered
    CALM = 1


class Text(str):
    pass


class Count(int):
    pass


def _cycle_list() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def _cycle_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


def _generator() -> Any:
    return (i for i in ())


@attrs.frozen(eq=False)
class Made:
    """A value made only when the input is used (`realize`): hypothesis never holds it, so it
    never prints, copies or compares deep, huge, cyclic or odd objects. Shown by its label."""

    label: str
    make: Callable[[], Any]

    def __repr__(self) -> str:
        return self.label


def realize(value: Any) -> Any:
    """`value` with every Made inside it made."""
    t = type(value)
    if t is Made:
        return value.make()
    if t is list or t is tuple:
        return t(realize(v) for v in value)
    if t is dict:
        return {realize(k): realize(v) for k, v in value.items()}
    if t is Parcel:
        return Parcel(realize(value.label), realize(value.weight))
    return value


#: Values hypothesis does not make: each factory gives a fresh one (some are mutable).
ODD = [
    Made(label, make)
    for label, make in {
        "object()": object,
        "a lambda": lambda: lambda: 1,
        "a generator": _generator,
        "RuntimeError('boom')": lambda: RuntimeError("boom"),
        "bytearray(b'ab')": lambda: bytearray(b"ab"),
        "memoryview(b'ab')": lambda: memoryview(b"ab"),
        "OrderedDict(a=1)": lambda: collections.OrderedDict(a=1),
        "defaultdict(list, b=[1])": lambda: collections.defaultdict(list, b=[1]),
        "Parcel('p', (1, 2))": lambda: Parcel("p", (1, 2)),
        "Stranger()": Stranger,
        "Hue.RED": lambda: Hue.RED,
        "Mood.CALM (unregistered)": lambda: Mood.CALM,
        "complex(1, 2)": lambda: complex(1, 2),
        "range(3)": lambda: range(3),
        "Ellipsis": lambda: ...,
        "the type int": lambda: int,
        "a list holding itself": _cycle_list,
        "a dict holding itself": _cycle_dict,
        "10**5000": lambda: 10**5000,
        "2**64": lambda: 2**64,
        "2**64 - 1": lambda: 2**64 - 1,
        "-(2**63)": lambda: -(2**63),
        "-(2**63) - 1": lambda: -(2**63) - 1,
        "Text('sub')": lambda: Text("sub"),
        "Count(3)": lambda: Count(3),
        "Decimal('sNaN')": lambda: Decimal("sNaN"),
        "Decimal('NaN')": lambda: Decimal("NaN"),
        "Decimal('1e999999')": lambda: Decimal("1e999999"),
        "datetime.max (UTC)": lambda: dt.datetime.max.replace(tzinfo=dt.UTC),
        "datetime.min": lambda: dt.datetime.min,
        "{2: .., (1, 2): .., None: .., True: ..}": lambda: {
            2: "int",
            (1, 2): "tuple",
            None: "none",
            True: "bool",
        },
        "frozenset({1, (2, 3)})": lambda: frozenset({1, (2, 3)}),
        "{'\\ud800': 1}": lambda: {"\ud800": 1},
        "'\\udfff'": lambda: "\udfff",
        "nan": lambda: float("nan"),
        "-0.0": lambda: -0.0,
        "-inf": lambda: float("-inf"),
        "[nan, nan, nan]": lambda: [float("nan")] * 3,
        "{'approved': True, 'by': '\\ud800'}": lambda: {"approved": True, "by": "\ud800"},
        "{'approved': 1}": lambda: {"approved": 1},
        "{'approved': True, 'by': None, 'comment': None}": lambda: {
            "approved": True,
            "by": None,
            "comment": None,
        },
        "{'approved': False, 'x': 1}": lambda: {"approved": False, "x": 1},
        "UUID(int=0)": lambda: uuid.UUID(int=0),
        "timedelta.max": lambda: dt.timedelta.max,
        "time(23, 59, UTC)": lambda: dt.time(23, 59, tzinfo=dt.UTC),
    }.items()
]

surrogate_text = st.lists(
    st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)), max_size=12
).map("".join)
texts = st.one_of(st.text(max_size=24), surrogate_text)
offsets = st.integers(-23 * 3600, 23 * 3600).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
hashables = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.tuples(st.integers(), st.text(max_size=4)),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    texts,
    st.binary(max_size=32),
    st.datetimes(timezones=st.none() | offsets),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.decimals(),
    st.uuids(),
    st.sampled_from(list(Hue)),
    st.sampled_from(ODD),
)


def nest(depth: int, kind: str, leaf: Any) -> Any:
    """`leaf` inside `depth` lists, dicts, tuples or a mix of them."""
    value = leaf
    for level in range(depth):
        k = kind if kind != "mix" else ("list", "dict", "tuple")[level % 3]
        value = [value] if k == "list" else {"k": value} if k == "dict" else (value,)
    return value


def _deep(depth: int, kind: str, leaf: Any) -> Made:
    return Made(f"nest({depth}, {kind!r}, {leaf!r})", lambda: nest(depth, kind, leaf))


def _huge(n: int, unit: Any) -> Made:
    return Made(f"{unit!r} * {n}", lambda: unit * n)


#: Deep values, dense around the codec's limits (MAX_DEPTH ext levels, 1024 plain levels).
deep = st.builds(
    _deep,
    st.one_of(st.integers(0, 1200), st.integers(95, 105), st.integers(1000, 1030)),
    st.sampled_from(["list", "dict", "tuple", "mix"]),
    st.sampled_from([None, 1, "x", float("nan"), (1,)]),
)
#: Large values up to 1 MiB encoded, the HTTP API's body limit: beyond it time and memory
#: grow with the size (a load test, not a fuzzing input).
huge = st.one_of(
    st.builds(_huge, st.sampled_from([2**16, 2**19, 2**20 - 64]), st.sampled_from(["x", b"x"])),
    st.builds(_huge, st.sampled_from([2**16, 2**18]), st.just("\u00e9")),
    st.builds(_huge, st.sampled_from([2**10, 2**13]), st.just([0])),
)
plain_values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.lists(kids, max_size=4).map(tuple),
        st.dictionaries(st.one_of(texts, hashables), kids, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.builds(Parcel, texts, kids),
    ),
    max_leaves=16,
)
# one_of picks a branch uniformly: deep and huge values, ten times as slow to take in, get an
# eighth each.
values = st.one_of(*[plain_values] * 6, deep, huge)


def same(a: Any, b: Any) -> bool:
    """`a == b` where NaN equals NaN, a signalling Decimal NaN does not raise, and tuples,
    sets and bools keep their types. A loop, not recursion: values nest 1,000 levels deep."""
    with contextlib.suppress(TarryError):
        if dumps(a) == dumps(b):  # the fast answer, in C; it keeps every type apart
            return True
    stack = [(a, b)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if type(a) is not type(b) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif isinstance(a, dict) and isinstance(b, dict):
            if len(a) != len(b):
                return False
            if a.keys() == b.keys():
                stack.extend((a[k], b[k]) for k in a)
            elif not all(
                any(same(k, j) and same(v, w) for j, w in b.items()) for k, v in a.items()
            ):  # NaN keys: pair them by hand
                return False
        elif isinstance(a, set | frozenset) and isinstance(b, set | frozenset):
            if type(a) is not type(b) or len(a) != len(b):
                return False
            if not all(any(same(x, y) for y in b) for x in a):
                return False
        elif isinstance(a, Parcel) and isinstance(b, Parcel):
            stack.extend([(a.label, b.label), (a.weight, b.weight)])
        elif not same_scalar(a, b):
            return False
    return True


def same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Decimal) and isinstance(b, Decimal) and (a.is_nan() or b.is_nan()):
        return str(a) == str(b)
    try:
        return bool(a == b) and (type(a) is type(b) or (type(a), type(b)) in STORED_AS)
    except Exception:
        return False


#: Subclasses of plain types are stored as the plain type.
STORED_AS = {(Text, str), (Count, int)}


# --- sessions to aim at ---------------------------------------------------------------------------


def _ask(ctx: Any) -> Any:
    return ctx.interrupt("a value, please")


def _explode(ctx: Any) -> Any:
    raise RuntimeError("planted failure")


def _after(ctx: Any) -> Any:
    return ctx.prev


def _echo(ctx: Any) -> Any:
    return ctx.outputs["w"]


FLOWS = {
    "gate": Flow("fuzz-gate", [Gate("approve", "ship it?")]),
    "wait": Flow("fuzz-wait", [Wait("w")]),
    "interrupt": Flow("fuzz-interrupt", [_ask]),
    "nested": Flow("fuzz-nested", [ForEach("items", [1], [Wait("w"), Wait("w2"), _echo])]),
    "failed": Flow("fuzz-failed", [_explode, _after]),
}
SITES = tuple(FLOWS)


class Pool:
    """One live session at every resumable site of one runtime, replaced once it is used up;
    plus a few sessions that ended, whose tokens were used."""

    def __init__(self, rt: Runtime, label: str) -> None:
        self.rt = rt
        self.label = label
        self.live: dict[str, tarry.Outcome] = {}
        self.ended: list[tarry.Outcome] = []  # oldest first; their tokens are used
        # The store key of every token issued (a signed token is stored as its key only): the
        # image shows whether each is used.
        self.keys: dict[str, str] = {}
        # Events already read, by session: an image reads only the ones after them.
        self.seen: dict[str, int] = {}
        for site in SITES:
            self.fresh(site)
        for site in ("wait", "gate"):
            self.retire(site, use=True)

    def fresh(self, site: str) -> tarry.Outcome:
        out = self.rt.run_sync(FLOWS[site])
        if out.token is None:
            msg = f"{site}: the flow did not stop with a token ({out.status})"
            raise RuntimeError(msg)
        self.live[site] = out
        self.keys[out.token] = self.rt.store.load(out.session_id).token
        self.mark(out.session_id)
        return out

    def retire(self, site: str, *, use: bool = False) -> None:
        """Replace the session at `site`; keep the last three ended ones, delete older ones."""
        out = self.live.pop(site)
        if use:  # end it through the API, so its token is used the ordinary way
            self.rt.cancel(out.token)
        self.mark(out.session_id)
        self.ended.append(out)
        while len(self.ended) > 3:
            old = self.ended.pop(0)
            self.rt.store.delete(old.session_id)
            del self.keys[old.token]
            self.seen.pop(old.session_id, None)
        self.fresh(site)

    def refresh(self) -> None:
        """Replace every session whose token was used, and take every change made so far as
        seen (after an accepted call, or a violation already reported)."""
        for site, out in list(self.live.items()):
            info = self.rt.store.find_token(self.keys[out.token])
            if info is None or info.used:
                self.retire(site)
        for row in self.rt.store.list(limit=10_000):
            self.mark(row.session_id)

    def mark(self, sid: str) -> None:
        """Take the events of `sid` written so far as read."""
        seen = self.seen.get(sid, 0)
        self.seen[sid] = seen + len(self.rt.store.events(sid, seen))

    def image(self) -> tuple[Any, ...]:
        """What a reader can see of the store: every session's record (state bytes, version,
        token, lease...), the events written since the last `sync`, every token's state.
        Equal images: nothing observable changed (events are append-only)."""
        store = self.rt.store
        # Loaded, not only listed: a listing leaves out the state.
        listed = sorted(r.session_id for r in store.list(limit=10_000))
        rows = [store.load(sid) for sid in listed]
        new = tuple(
            tuple(map(encode_event, store.events(r.session_id, self.seen.get(r.session_id, 0))))
            for r in rows
        )
        return rows, new, tuple(store.find_token(k) for k in self.keys.values())

    def stored_output(self, sid: str, name: str) -> Any:
        return self.rt.session(sid).state.outputs.get(name)


SECRET = b"fuzz-secret-key-0123456789"


def runtimes(tmp: str) -> list[tuple[str, Callable[[], Runtime]]]:
    """The runtimes every stateful target runs on (makers, so each target starts clean)."""
    counter = iter(range(10**6))
    return [
        ("memory", lambda: Runtime(flows=FLOWS.values())),
        ("memory+secret", lambda: Runtime(flows=FLOWS.values(), secret=SECRET)),
        (
            "sqlite",
            lambda: Runtime(f"sqlite:///{tmp}/fuzz-{next(counter)}.db", flows=FLOWS.values()),
        ),
    ]


def close(rt: Runtime) -> None:
    closer = getattr(rt.store, "close", None)
    if closer is not None:
        closer()


# --- target 1: the snapshot decoder --------------------------------------------------------------


@register
class Grade(enum.IntEnum):
    LOW = 1


def _remember(ctx: Any) -> Any:
    ctx.state["seen"] = {1, 2}
    ctx.state["pair"] = (ctx.input["id"], Parcel("x", frozenset({"a"})))
    return ctx.input["when"]


def _double(ctx: Any) -> Any:
    return (ctx.item * 2, {ctx.item})


def corpus() -> list[bytes]:
    """Real snapshots and events: paused inside a ForEach, failed, cancelled and completed
    sessions whose input and state hold every ext type."""
    rt = Runtime()
    rich = {
        "when": dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=dt.timezone(dt.timedelta(hours=5))),
        "day": dt.date(2024, 1, 2),
        "at": dt.time(1, 2, 3),
        "gap": dt.timedelta(days=2, seconds=3),
        "id": uuid.UUID(int=7),
        "money": Decimal("12.50"),
        "raw": b"\x00\xff",
        "pair": (1, (2,)),
        "tags": frozenset({"a", "b"}),
        "set": {3},
        "hue": Hue.BLUE,
        "grade": Grade.LOW,
        "parcel": Parcel("p", [1.5, None, True]),
        "big": 2**64 - 1,
        "neg": -(2**63),
    }
    flow = Flow(
        "fuzz-corpus", [_remember, ForEach("items", [1, 2], [_double, Gate("ok")]), Wait("w")]
    )
    blobs = []
    out = rt.run_sync(flow, rich)
    while out.paused:
        blobs.append(rt.store.load(out.session_id).state)
        out = rt.resume_sync(out.token, True if out.pause.kind == "human" else rich)
    for extra in (rt.run_sync(FLOWS["failed"]), rt.run_sync(FLOWS["nested"])):
        blobs.append(rt.store.load(extra.session_id).state)
    rt.cancel(rt.run_sync(FLOWS["gate"]).token)
    for row in rt.store.list(limit=100):
        blobs.append(rt.store.load(row.session_id).state)  # a listing leaves the state out
        blobs.extend(encode_event(e) for e in rt.store.events(row.session_id))
    return [b for b in blobs if b]


EXT_HEADERS = {0xD4: 1, 0xD5: 1, 0xD6: 1, 0xD7: 1, 0xD8: 1, 0xC7: 2, 0xC8: 3, 0xC9: 5}
LENGTH_HEADERS = {0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9}


def mutate(blob: bytes, ops: list[tuple[Any, ...]], pool: list[bytes]) -> bytes:
    """`blob` changed by each op in turn: positions are taken modulo the length."""
    data = bytearray(blob)
    for op, a, b in ops:
        n = max(len(data), 1)
        if op == "flip" and data:
            data[a % n] ^= 1 << (b % 8)
        elif op == "byte" and data:
            data[a % n] = b % 256
        elif op == "truncate":
            del data[a % n :]
        elif op == "insert":
            data[a % n : a % n] = bytes([b % 256]) * (1 + b % 7)
        elif op == "delete":
            del data[a % n : a % n + 1 + b % 16]
        elif op == "splice":
            other = pool[b % len(pool)]
            data = data[: a % n] + other[(a * 7 + b) % max(len(other), 1) :]
        elif op == "duplicate":
            start = a % n
            data[start:start] = data[start : start + 1 + b % 64]
        elif op in ("ext", "length"):
            # Headers are found by their first byte: some of these bytes are not headers at
            # all, which is fine for a fuzzer; the rest hit real ext codes and lengths.
            table = EXT_HEADERS if op == "ext" else LENGTH_HEADERS
            spots = [i for i, byte in enumerate(data) if byte in table]
            if spots:
                at = spots[a % len(spots)]
                shift = EXT_HEADERS.get(data[at], 1) if op == "ext" else 1
                if at + shift < len(data):
                    data[at + shift] = b % 256 if op == "ext" else (data[at + shift] + b) % 256
        elif op == "fixlength" and data:
            at = a % n
            if 0x80 <= data[at] <= 0xBF or 0x90 <= data[at] <= 0x9F:  # fixmap/array/str
                data[at] = (data[at] & 0xE0 if data[at] >= 0xA0 else data[at] & 0xF0) | b % 16
    return bytes(data)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if type(doc) is dict:
        for key, value in doc.items():
            found += paths(value, (*prefix, key))
    elif type(doc) in (list, tuple):
        for index, value in enumerate(doc):
            found += paths(value, (*prefix, index))
    return found


def replace(doc: Any, path: tuple[Any, ...], new: Any, delete: bool = False) -> Any:
    """A copy of `doc` with the value at `path` replaced by `new` (or deleted)."""
    if not path:
        return new
    copy: Any = dict(doc) if type(doc) is dict else list(doc)
    head = path[0]
    if delete and len(path) == 1:
        del copy[head]
    else:
        copy[head] = replace(doc[head], path[1:], new, delete)
    return tuple(copy) if type(doc) is tuple else copy


encodable = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(),
        st.text(max_size=16),
        st.binary(max_size=16),
        st.datetimes(timezones=offsets),
        st.sampled_from(list(Hue)),
    ),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.lists(kids, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=8), kids, max_size=4),
        st.frozensets(st.integers(-(2**63), 2**63), max_size=3),
    ),
    max_leaves=8,
)
OPS = (
    "flip",
    "byte",
    "truncate",
    "insert",
    "delete",
    "splice",
    "duplicate",
    "ext",
    "length",
    "fixlength",
)
ops = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 2**16), st.integers(0, 2**16)),
    min_size=1,
    max_size=4,
)


def random_ops(rnd: random.Random) -> list[tuple[str, int, int]]:
    return [
        (rnd.choice(OPS), rnd.randrange(2**16), rnd.randrange(2**16))
        for _ in range(rnd.randint(1, 3))
    ]


decoder_inputs = st.one_of(
    st.tuples(st.just("random"), st.binary(max_size=600)),
    st.tuples(st.just("mutated"), st.integers(0, 10**6), ops),
    st.tuples(
        st.just("shape"),
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.sampled_from(["replace", "delete"]),
        encodable,
    ),
    st.tuples(
        st.just("unregistered"),
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.sampled_from([9, 8]),
        st.text(max_size=12),
        encodable,
    ),
    st.tuples(
        st.just("nested"), st.integers(0, 140), st.sampled_from([1, 2, 3, 8, 9]), st.integers(0, 40)
    ),
    st.tuples(st.just("plain-deep"), st.integers(0, 5000), st.sampled_from([b"\x91", b"\x81\xc0"])),
)


def build_blob(
    recipe: tuple[Any, ...],
    blobs: list[bytes],
    docs: list[Any],
    doc_paths: list[list[tuple[Any, ...]]],
) -> bytes | None:
    """The bytes a decoder recipe names (None when the recipe cannot be encoded)."""
    kind = recipe[0]
    if kind == "random":
        return recipe[1]
    if kind == "mutated":
        return mutate(blobs[recipe[1] % len(blobs)], recipe[2], blobs)
    if kind in ("shape", "unregistered"):
        i = recipe[1] % len(docs)
        path = doc_paths[i][recipe[2] % len(doc_paths[i])]
        try:
            if kind == "shape":
                new, delete = recipe[4], recipe[3] == "delete" and bool(path)
            else:
                named = [f"fuzz.unregistered.{recipe[4]}", recipe[5]]
                new, delete = msgpack.ExtType(recipe[3], dumps(named)), False
            return dumps(replace(docs[i], path, new, delete))
        except TarryError:
            return None
    if kind == "nested":
        _, depth, code, plain = recipe
        payload = msgpack.packb(nest(plain, "list", None))
        for _ in range(depth):
            payload = msgpack.packb([msgpack.ExtType(code, payload)])
        return payload
    _, depth, unit = recipe  # plain-deep
    return unit * depth + b"\xc0"


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "decode_state": decode_state,
    "decode_event": lambda data: decode_event(data, "s-fuzz"),
}


def decode_trial(
    tally: Tally, trial: str, kind: str, data: bytes, decoders: dict[str, Callable[[bytes], Any]]
) -> None:
    """One input to every decoder: a value or SnapshotError, never an unregistered class, and a
    decoded state must encode again (or refuse with a TarryError)."""
    tally.inputs += 1
    shown = (kind, len(data), data[:160])
    for name, decode in decoders.items():
        got = tally.call(trial, f"{name}()", lambda d=decode: d(data), shown, pure=True)
        if got.error is None and kind == "unregistered":
            tally.fail(trial, f"{name}() restored a class that is not registered", shown)
        if got.error is None and name == "decode_state":
            tally.call(
                trial,
                "encode_state() of a decoded state",
                lambda v=got.value: encode_state(v),
                shown,
                pure=True,
            )


def decoder_target(tally: Tally, decoders: dict[str, Callable[[bytes], Any]] | None = None) -> None:
    """Each example (random bytes, a mutated real snapshot or event, valid msgpack of a wrong
    shape, an unregistered class, deep nesting) and random mutations of it."""
    decoders = decoders or DECODERS
    blobs = corpus()
    docs = [loads(b) for b in blobs]
    doc_paths = [paths(d) for d in docs]

    def body(n: int, recipe: tuple[Any, ...], rnd: random.Random) -> None:
        blob = build_blob(recipe, blobs, docs, doc_paths)
        if blob is None:
            tally.ends["unbuildable example"] += 1
            return
        decode_trial(tally, f"{n}.0", recipe[0], blob, decoders)
        for k in range(1, FANOUT["decoder"]):
            decode_trial(
                tally, f"{n}.{k}", "mutated", mutate(blob, random_ops(rnd), blobs), decoders
            )

    drive(decoder_inputs, tally, body)


# --- target 2: the token parser ------------------------------------------------------------------

URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
MUTATIONS = (
    "change",
    "truncate",
    "extend",
    "insert",
    "delete",
    "swapcase",
    "unprefix",
    "pad",
    "nul",
    "fullwidth",
    "double",
)
mutations = st.sampled_from(MUTATIONS)
token_inputs = st.one_of(
    st.tuples(st.just("value"), st.one_of(values, texts, st.binary())),
    st.tuples(st.just("tk_"), texts),
    st.tuples(
        st.just("live"),
        st.sampled_from(SITES),
        mutations,
        st.integers(0, 2**16),
        st.one_of(st.sampled_from(list(URLSAFE + ".~=+/ ")), st.characters()),
    ),
    st.tuples(st.just("used"), st.integers(0, 2)),
    st.tuples(
        st.just("sid"), st.sampled_from(SITES), mutations, st.integers(0, 2**16), st.characters()
    ),
    st.tuples(
        st.just("huge"),
        st.sampled_from([2**16, 2**20, 2**23]),
        st.sampled_from(["", "tk_"]),
        st.sampled_from(["A", "\u00e9", "\x00"]),
    ),
)


def alter(text: str, how: str, at: int, char: str) -> str:
    """`text` changed once by `how`; never equal to `text`."""
    if not text:
        return char or "x"
    i = at % len(text)
    changed = {
        "change": text[:i] + char + text[i + 1 :],
        "truncate": text[:i],
        "extend": text + char,
        "insert": text[:i] + char + text[i:],
        "delete": text[:i] + text[i + 1 :],
        "swapcase": text.swapcase(),
        "unprefix": text[3:],
        "pad": f" {text}\n",
        "nul": text[:i] + "\x00" + text[i:],
        "fullwidth": text[:i] + chr(0xFF01 + (ord(text[i]) - 0x21) % 94) + text[i + 1 :],
        "double": text + text,
    }[how]
    if changed == text:  # e.g. a char replaced by itself
        changed = text[:-1] + ("A" if text[-1] != "A" else "B")
    return changed


def random_char(rnd: random.Random) -> str:
    roll = rnd.random()
    if roll < 0.6:
        return rnd.choice(URLSAFE + ".~=+/ ")
    if roll < 0.8:
        return chr(rnd.randrange(0x80))
    if roll < 0.9:
        return chr(rnd.randrange(0xD800, 0xE000))  # lone surrogates
    return chr(rnd.randrange(0x110000))


def random_token_recipe(rnd: random.Random) -> tuple[Any, ...]:
    kind = rnd.choice(["live", "live", "live", "sid", "tk_", "used"])
    if kind == "tk_":
        return ("tk_", "".join(random_char(rnd) for _ in range(rnd.randrange(60))))
    if kind == "used":
        return ("used", rnd.randrange(3))
    return (kind, rnd.choice(SITES), rnd.choice(MUTATIONS), rnd.randrange(2**16), random_char(rnd))


def token_input(recipe: tuple[Any, ...], pool: Pool) -> tuple[Any, str]:
    """The value a token recipe names, and which errors it must give: "unknown" (a token
    nobody issued), "used" (a used token) or "any" (any TarryError)."""
    kind = recipe[0]
    if kind == "value":
        return realize(recipe[1]), "any"
    if kind == "tk_":
        return "tk_" + recipe[1], "unknown"
    if kind == "live":
        _, site, how, at, char = recipe
        return alter(pool.live[site].token, how, at, char), "unknown"
    if kind == "used":
        return pool.ended[recipe[1] % len(pool.ended)].token, "used"
    if kind == "sid":
        _, site, how, at, char = recipe
        return alter(pool.live[site].session_id, how, at, char), "unknown"
    _, n, prefix, char = recipe
    return prefix + char * n, "unknown"


def expected_errors(method: str, expect: str, given: Any) -> tuple[type[BaseException], ...]:
    if expect == "used":
        return (tarry.TokenAlreadyUsed,)
    if expect == "unknown" and isinstance(given, str):
        # cancel() also takes a session id: what is not shaped like a token is looked up as one
        if method == "cancel":
            return (tarry.UnknownToken, tarry.UnknownSession)
        return (tarry.UnknownToken,)
    return (TarryError,)


def token_trial(tally: Tally, trial: str, pool: Pool, recipe: tuple[Any, ...]) -> None:
    """One input to resume, skip and cancel: each refuses it with the expected error, and
    together they leave the store as it was (none of these inputs is a live token). The store
    is compared once after the three: reading it costs more than the three calls."""
    given, expect = token_input(recipe, pool)
    shown = (pool.label, recipe, "see recipe" if recipe[0] == "value" else given)
    before = pool.image()
    refusals = []
    for method in ("resume", "skip", "cancel"):
        what = f"{pool.label} {method}()"
        got = tally.call(trial, what, lambda m=method: getattr(pool.rt, m)(given), shown)
        allowed = expected_errors(method, expect, given)
        if got.error is None:
            tally.fail(trial, f"{what} accepted a token it never issued", shown)
            pool.refresh()
            before = pool.image()
            continue
        if isinstance(got.error, TarryError) and not isinstance(got.error, allowed):
            names = "/".join(c.__name__ for c in allowed)
            tally.fail(trial, f"{what} raised {type(got.error).__name__}, expected {names}", shown)
        refusals.append(f"{method}() ({type(got.error).__name__})")
    if refusals and pool.image() != before:
        tally.fail(
            trial,
            f"{pool.label} refused it, as {', '.join(refusals)}, but the store changed",
            shown,
        )
        pool.refresh()


def token_target(tally: Tally, makers: list[tuple[str, Callable[[], Runtime]]]) -> None:
    """Each input goes to resume, skip and cancel on every runtime; none may be accepted."""
    pools = [Pool(make(), label) for label, make in makers]

    def body(n: int, recipe: tuple[Any, ...], rnd: random.Random) -> None:
        for k in range(FANOUT["tokens"]):
            variant = recipe if k == 0 else random_token_recipe(rnd)
            tally.inputs += 1
            for pool in pools:
                token_trial(tally, f"{n}.{k}", pool, variant)

    try:
        drive(token_inputs, tally, body)
    finally:
        for pool in pools:
            close(pool.rt)


# --- target 3: resume values ---------------------------------------------------------------------


def gate_accepts(value: Any) -> bool:
    """The decisions API.md allows: a bool, or {"approved": bool, "by": str?, "comment": str?}."""
    if isinstance(value, bool):
        return True
    return (
        isinstance(value, dict)
        and isinstance(value.get("approved"), bool)
        and set(value) <= {"approved", "by", "comment"}
        and all(value.get(k) is None or isinstance(value[k], str) for k in ("by", "comment"))
    )


#: Where each site's flow keeps the value it was given.
OUTPUT_OF = {
    "gate": "approve",
    "wait": "w",
    "interrupt": "_ask",
    "nested": "items",
    "failed": "_explode",
}


def value_trial(tally: Tally, trial: str, pool: Pool, site: str, recipe: Any) -> None:
    """Hand a value to the session at `site`: accepted (and then stored exactly and the run
    goes on), or refused with a TarryError that leaves the session exactly as it was."""
    rt = pool.rt
    out = pool.live[site]
    method = rt.skip if site == "failed" else rt.resume
    what = f"{pool.label} {'skip' if site == 'failed' else 'resume'}() at {site}"
    shown = (pool.label, site, recipe)
    value = realize(recipe)
    before = pool.image()
    got = tally.call(trial, what, lambda: method(out.token, value), shown)
    if got.error is not None:
        if (
            site == "gate"
            and not gate_accepts(value)
            and not isinstance(got.error, tarry.InvalidResumeValue | tarry.NotSerializable)
        ):
            tally.fail(
                trial,
                f"{what} refused a bad decision with "
                f"{type(got.error).__name__}, not InvalidResumeValue",
                shown,
            )
        if site != "gate" and isinstance(got.error, tarry.InvalidResumeValue):
            tally.fail(trial, f"{what} refused a value with InvalidResumeValue", shown)
        if pool.image() != before:
            tally.fail(
                trial, f"{what} refused ({error_text(got.error)}) but the store changed", shown
            )
            pool.refresh()
        return
    result = got.value
    if site == "gate" and not gate_accepts(value):
        tally.fail(trial, f"{what} accepted a decision API.md rejects", shown)
        pool.retire(site)
        return
    if site == "nested" and result.paused:
        result = rt.resume_sync(result.token, None)
    if not result.ok:
        detail = result.error and f"{result.error.type}: {describe(result.error.message, 160)}"
        tally.fail(
            trial, f"{what} accepted the value, then the run ended {result.status}: {detail}", shown
        )
    else:
        if site == "gate":
            expected = {"approved": value} if isinstance(value, bool) else dict(value)
        else:
            expected = [value] if site == "nested" else value
        stored = pool.stored_output(out.session_id, OUTPUT_OF[site])
        if not same(expected, stored):
            tally.fail(trial, f"{what} stored {describe(stored, 120)}, not the value given", shown)
    pool.retire(site)


value_inputs = st.one_of(
    values,
    st.fixed_dictionaries(
        {"approved": st.booleans()},
        optional={
            "by": st.one_of(st.none(), texts, scalars),
            "comment": st.one_of(st.none(), texts, scalars),
            "extra": scalars,
        },
    ),
)


def value_target(tally: Tally, makers: list[tuple[str, Callable[[], Runtime]]]) -> None:
    """Each value goes to every site (on the runtimes in turn); at the end, every session that
    refused values must still take a good one."""
    pools = [Pool(make(), label) for label, make in makers]

    def body(n: int, recipe: Any, rnd: random.Random) -> None:
        for k, site in enumerate(SITES):
            tally.inputs += 1
            value_trial(tally, f"{n}.{k}", pools[(n + k) % len(pools)], site, recipe)

    try:
        drive(value_inputs, tally, body)
        for pool in pools:
            for site, out in list(pool.live.items()):
                method = pool.rt.skip if site == "failed" else pool.rt.resume
                got = tally.call(
                    "end",
                    f"{pool.label} a good value at {site}",
                    lambda m=method, t=out.token: m(t, True),
                    (site, True),
                )
                tally.ends["usable after refusals"] += got.error is None
    finally:
        for pool in pools:
            close(pool.rt)


# --- target 4: the HTTP API ----------------------------------------------------------------------

MAX_BODY = 1 << 20
ROUTES = ("resume", "cancel", "skip", "token", "login")
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=16)
    ),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(["value", "output", "token", "approved", "", "__proto__"])
bodies = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=300)),
    st.tuples(st.just("object"), st.dictionaries(field_names, json_values, max_size=3)),
    st.tuples(st.just("top"), json_values),
    st.tuples(
        st.just("decision"),
        st.fixed_dictionaries(
            {
                "value": st.fixed_dictionaries(
                    {"approved": st.one_of(st.booleans(), json_values)},
                    optional={"by": json_values, "comment": json_values},
                )
            }
        ),
    ),
    st.tuples(st.just("malformed"), json_values, ops),
    st.tuples(
        st.just("deep"),
        st.one_of(st.integers(0, 3000), st.integers(10_000, 200_000)),
        st.sampled_from(["[", '{"a":']),
        st.booleans(),
    ),
    st.tuples(
        st.just("number"),
        st.sampled_from(
            [
                "1e400",
                "-1e400",
                "NaN",
                "Infinity",
                "-0",
                "1e-400",
                "1" * 5000,
                "1" * 4300,
                "18446744073709551616",
                "-9223372036854775809",
                "0.1e99999999",
            ]
        ),
    ),
    st.tuples(st.just("huge"), st.sampled_from([MAX_BODY - 16, MAX_BODY + 1, 4 * MAX_BODY])),
    st.tuples(
        st.just("text"),
        st.sampled_from(
            [
                '"\\ud800"',
                '{"value": "\\udfff"}',
                '{"token": "tk_\\ud800"}',
                "\ufeff{}",
                "{}{}",
                '{"value": 1, "value": 2}',
                " ",
                "",
            ]
        ),
    ),
)
sids = st.one_of(st.sampled_from((*SITES, "ended")), st.text(max_size=16), surrogate_text)
http_inputs = st.tuples(sids, bodies, st.sampled_from(SITES), st.one_of(st.none(), mutations))


def http_body(spec: tuple[Any, ...]) -> bytes:
    kind = spec[0]
    if kind == "bytes":
        return spec[1]
    if kind in ("object", "top", "decision"):
        return json.dumps(spec[1]).encode()
    if kind == "malformed":
        return mutate(json.dumps(spec[1]).encode(), spec[2], [b"{}", b"[]", b'"'])
    if kind == "deep":
        _, n, opener, wrapped = spec
        text = "[" * n + "]" * n if opener == "[" else opener * n + "1" + "}" * n
        return (f'{{"value": {text}}}' if wrapped else text).encode()
    if kind == "number":
        return f'{{"value": {spec[1]}}}'.encode()
    if kind == "huge":
        return b'{"value": "' + b"a" * spec[1] + b'"}'
    return spec[1].encode("utf-8", "surrogatepass")


def http_request(route: str, recipe: tuple[Any, ...], pool: Pool) -> tuple[str, bytes]:
    """The path and body of one request; session ids are live ones (maybe altered) or text."""
    sid_spec, spec, site, how = recipe
    if sid_spec in FLOWS:
        sid = pool.live[sid_spec].session_id
        if how is not None:
            sid = alter(sid, how, len(sid_spec), "x")
    elif sid_spec == "ended":
        sid = pool.ended[-1].session_id
    else:
        sid = sid_spec
    body = http_body(spec)
    if route == "token" and spec[0] == "object" and "token" in spec[1] and how is not None:
        # a body naming a token nobody issued: a live one, altered
        body = json.dumps({**spec[1], "token": alter(pool.live[site].token, how, 9, "A")}).encode()
    quoted = urllib.parse.quote(sid, safe="", errors="surrogatepass")
    path = {"token": "/api/resume", "login": "/login"}.get(route, f"/api/sessions/{quoted}/{route}")
    return path, body


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        msg = f"{name} is not JSON"
        raise ValueError(msg)

    return json.loads(text, parse_constant=refuse)


def check_answer(
    tally: Tally, trial: str, pool: Pool, what: str, got: Probe, before: Any, shown: Any
) -> None:
    """The HTTP oracle: 2xx or 4xx, a strict JSON body, and a 4xx changed nothing."""
    if got.error is not None:
        return  # Tally.call reported it
    answer = got.value
    status = answer.status_code
    tally.ends[f"HTTP {status}"] += 1
    if not (200 <= status < 300 or 400 <= status < 500):
        tally.fail(trial, f"HTTP {status} from {what}: {describe(answer.text, 160)}", shown)
    if answer.content or status != 204:
        try:
            strict_json(answer.text)
            kind = answer.headers.get("content-type", "")
            if not kind.startswith("application/json"):
                msg = f"content-type {kind!r}"
                raise ValueError(msg)
        except ValueError as exc:
            tally.fail(
                trial,
                f"HTTP {status} from {what}: body not strict JSON ({exc}): "
                f"{describe(answer.text, 160)}",
                shown,
            )
    if 400 <= status < 500 and pool.image() != before:
        tally.fail(
            trial,
            f"HTTP {status} from {what} refused ({describe(answer.text, 120)}) "
            f"but the store changed",
            shown,
        )
    if 200 <= status < 300:
        pool.refresh()


def http_trial(
    tally: Tally,
    trial: str,
    pool: Pool,
    token: str | None,
    client: Poster,
    route: str,
    recipe: tuple[Any, ...],
) -> None:
    tally.inputs += 1
    path, content = http_request(route, recipe, pool)
    headers = {"authorization": f"Bearer {token}"} if token and route != "login" else {}
    what = f"{pool.label}{'+token' if token else ''} POST {path[:60]}"
    shown = (pool.label, path[:80], recipe[1][0], len(content), content[:160])
    before = pool.image()
    got = tally.call(
        trial, what, lambda: client.post(path, content=content, headers=headers), shown
    )
    check_answer(tally, trial, pool, what, got, before, shown)


def http_target(
    tally: Tally,
    makers: list[tuple[str, Callable[[], Runtime]]],
    app_factory: Callable[[Runtime, str | None], Any] | None = None,
) -> None:
    """Each body goes to every POST route, through an app without a token or one with a token
    (sent as a bearer header, except to /login), over each runtime in turn. Requests go
    in-process (httpx's ASGI transport) on one event loop: no sockets, no thread per call."""
    import asyncio

    import httpx
    from tarry.drivers.http import create_app

    make_app = app_factory or (lambda rt, token: create_app(rt, token=token))
    pools = [Pool(make(), label) for label, make in makers]
    loop = asyncio.new_event_loop()
    clients = []
    for pool in pools:
        for token in (None, "fuzz-monitor-token"):
            transport = httpx.ASGITransport(
                app=make_app(pool.rt, token),
                raise_app_exceptions=False,
                client=("127.0.0.1", 50000),
            )
            client = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765")
            clients.append((pool, token, Poster(loop, client)))

    def body(n: int, recipe: tuple[Any, ...], rnd: random.Random) -> None:
        for k, route in enumerate(ROUTES):
            pool, token, poster = clients[(n * len(ROUTES) + k) % len(clients)]
            http_trial(tally, f"{n}.{k}", pool, token, poster, route, recipe)

    try:
        drive(http_inputs, tally, body)
    finally:
        for _, _, poster in clients:
            loop.run_until_complete(poster.client.aclose())
        loop.close()
        for pool in pools:
            close(pool.rt)


@attrs.frozen
class Poster:
    """Sends a POST through an async client on a loop, from sync code."""

    loop: Any
    client: Any

    def post(self, path: str, *, content: bytes, headers: dict[str, str]) -> Any:
        return self.loop.run_until_complete(
            self.client.post(path, content=content, headers=headers)
        )


# --- atheris -------------------------------------------------------------------------------------


def atheris_status() -> str:
    if importlib.util.find_spec("atheris") is None:
        return "not installable here: no atheris module (pip install atheris failed)"
    return f"atheris {importlib.metadata.version('atheris')}"


def run_atheris(
    harness: str, runs: int, seed: int, timeout: float = 300.0, per_input: int = 2
) -> dict[str, Any]:
    """Run one fuzz_atheris.py harness in a child process (libFuzzer ends the process): the
    inputs it ran, its coverage, the known bugs it met and, if it crashed, the crash."""
    cmd = [
        sys.executable,
        str(HERE / "fuzz_atheris.py"),
        harness,
        "--runs",
        str(runs),
        "--seed",
        str(seed),
        "--timeout",
        str(per_input),
    ]
    with tempfile.TemporaryDirectory(prefix="tarry-atheris-") as cwd:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            return {
                "runs": 0,
                "coverage": 0,
                "known": [],
                "crash": f"{harness}: no end within {timeout:g} s",
            }
        crash = None
        log = done.stdout + done.stderr
        if done.returncode != 0:  # keep the input libFuzzer wrote, to reproduce the crash
            kept = Path(tempfile.mkdtemp(prefix=f"tarry-atheris-{harness}-crash-"))
            for artifact in Path(cwd).glob("atheris-*"):
                artifact.rename(kept / artifact.name)
            found = re.search(r"=== Uncaught Python exception: ===.*", log, re.S)
            crash = (found[0] if found else log.strip()[-600:])[:700] + f" [input kept in {kept}]"
    executed = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    coverage = re.findall(r"\bcov: (\d+)", log)
    return {
        "runs": int(executed[-1]) if executed else 0,
        "coverage": int(coverage[-1]) if coverage else 0,
        "known": re.findall(r"^known bug \S+: (.*)$", log, re.M),
        "crash": crash,
    }


# --- the campaign --------------------------------------------------------------------------------


def campaign(
    *,
    seed: int = 0,
    budget: int = QUICK_BUDGET,
    targets: tuple[str, ...] = TARGETS,
    atheris_runs: int = 0,
) -> dict[str, Any]:
    """Run the targets with about `budget` inputs each (and atheris for `atheris_runs`
    executions per harness, when installed); the JSON-able result of the proof harness."""
    start = time.perf_counter()
    figures: dict[str, Any] = {
        "seed": seed,
        "inputs_per_target": budget,
        "time_limit_s": TIME_LIMIT,
        "memory_limit_mib": MEMORY_LIMIT // 2**20,
    }
    tallies = []
    with tempfile.TemporaryDirectory(prefix="tarry-fuzz-") as tmp:
        makers = runtimes(tmp)
        figures["runtimes"] = ", ".join(label for label, _ in makers)
        for target in targets:
            tally = Tally(target, seed, budget)
            t0 = time.perf_counter()
            if target == "decoder":
                decoder_target(tally)
            elif target == "tokens":
                token_target(tally, makers)
            elif target == "values":
                value_target(tally, makers)
            else:
                http_target(tally, makers)
            figures.update(tally.figures())
            figures[f"{target}_seconds"] = round(time.perf_counter() - t0, 1)
            tallies.append(tally)
    violations = [v for t in tallies for v in t.violations]
    status = atheris_status()
    figures["atheris"] = status
    if atheris_runs and status.startswith("atheris "):
        for harness in ("decoder", "tokens"):
            report = run_atheris(harness, atheris_runs, seed)
            figures[f"atheris_{harness}_runs"] = report["runs"]
            figures[f"atheris_{harness}_coverage_edges"] = report["coverage"]
            target = f"atheris-{harness}"
            for message in report["known"]:  # each known bug is reported once per run
                violations.append(Violation(target, "-", message, ""))
            if report["crash"]:
                violations.append(
                    Violation(
                        target,
                        str(report["runs"]),
                        report["crash"],
                        "the crash file kept, as named",
                    )
                )
    elif not atheris_runs:
        figures["atheris"] = f"{status} (runs with --full only)"
    known = collections.Counter(known_bug(v) for v in violations)
    new = known.pop(None, 0)
    figures["new_failures"] = new
    figures["known_bug_failures"] = sum(known.values())
    figures["known_bugs_hit"] = ", ".join(f"{k} {n}" for k, n in sorted(known.items())) or "none"
    inputs = sum(t.inputs for t in tallies) + sum(
        v for k, v in figures.items() if k.startswith("atheris_") and k.endswith("_runs")
    )
    return {
        "name": NAME,
        "trials": inputs,
        "failures": len(violations),
        "seconds": round(time.perf_counter() - start, 1),
        "seed": seed,
        "figures": figures,
        "failure_examples": examples(violations, seed, budget),
        "violations": violations,
    }


def distinct(violations: list[Violation]) -> list[Violation]:
    """One violation per bug (known ones by key, others by their message without numbers),
    new ones first."""
    chosen, seen = [], set()
    for v in sorted(violations, key=lambda v: known_bug(v) is not None):
        key = known_bug(v) or re.sub(r"\d+", "N", v.message)[:80]
        if key not in seen:
            seen.add(key)
            chosen.append(v)
    return chosen


def examples(violations: list[Violation], seed: int, budget: int) -> list[str]:
    """Up to MAX_EXAMPLES distinct failures, new bugs first, each with its reproduction."""
    return [
        f"[{f'known bug {known_bug(v)}' if known_bug(v) else 'NEW'}] {v.target} trial "
        f"{v.trial}: {v.message}; input {v.input}; reproduce: tests/proof/fuzz.py --seed "
        f"{seed} --budget {budget} --target {v.target}"
        for v in distinct(violations)[:MAX_EXAMPLES]
    ]


def summary(result: dict[str, Any]) -> str:
    f = result["figures"]
    parts = [
        f"{t}: {f[f'{t}_inputs']} inputs, {f[f'{t}_failures']} failures, "
        f"slowest {f[f'{t}_slowest_ms']} ms, peak {f[f'{t}_peak_traced_mib']} MiB"
        for t in TARGETS
        if f"{t}_inputs" in f
    ]
    return (
        f"fuzz (seed {result['seed']}): {result['trials']} inputs in {result['seconds']} s; "
        f"{'; '.join(parts)}; atheris: {f['atheris']}; {result['failures']} failures "
        f"({f['new_failures']} new; known bugs hit: {f['known_bugs_hit']})."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true", help="the make proof size")
    parser.add_argument("--budget", type=int, help="inputs per target (overrides --full)")
    parser.add_argument(
        "--target", choices=TARGETS, action="append", help="run only this target (repeatable)"
    )
    parser.add_argument("--verbose", action="store_true", help="print one line per distinct bug")
    args = parser.parse_args(argv)
    budget = args.budget or (FULL_BUDGET if args.full else QUICK_BUDGET)
    result = campaign(
        seed=args.seed,
        budget=budget,
        targets=tuple(args.target or TARGETS),
        atheris_runs=ATHERIS_RUNS if args.full else 0,
    )
    violations = result.pop("violations")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    shown = distinct(violations) if args.verbose else []
    for line in (
        result["failure_examples"]
        if not shown
        else [
            f"{known_bug(v) or 'NEW'} {v.target} {v.trial}: {v.message} | {v.input}" for v in shown
        ]
    ):
        print(" -", line)
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
