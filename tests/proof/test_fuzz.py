"""The fuzzing campaign's quick slice, its checkers catching planted faults, and one regression
test per bug it found (all fixed; a bug found and not yet fixed gets a strict xfail test here and
an entry in fuzz.KNOWN, so that the campaign tells it from new ones)."""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import httpx
import pytest
import tarry
from proof import fuzz
from support import WAIT
from tarry import Flow, Runtime, Wait
from tarry.drivers.http import create_app
from tarry.snapshots.records import decode_state, encode_state

# --- the quick slice -----------------------------------------------------------------------------


def test_the_quick_slice_finds_no_new_failure() -> None:
    result = fuzz.campaign(seed=0, budget=fuzz.QUICK_BUDGET)
    figures = result["figures"]
    for target in fuzz.TARGETS:
        assert figures[f"{target}_inputs"] >= fuzz.QUICK_BUDGET * 0.8, target
    assert result["trials"] == sum(figures[f"{t}_inputs"] for t in fuzz.TARGETS)
    assert result["failures"] == figures["new_failures"] + figures["known_bug_failures"]
    assert result["failures"] == 0, "\n".join(result["failure_examples"])


# --- the checkers catch planted faults -----------------------------------------------------------


def planted_decoders(tally: fuzz.Tally, decode) -> list[fuzz.Violation]:
    fuzz.decoder_target(tally, {"planted": decode})
    return tally.violations


def test_the_decoder_checker_catches_an_untyped_error() -> None:
    found = planted_decoders(fuzz.Tally("decoder", 0, 16), lambda data: {}[data])
    assert found and "raised KeyError" in found[0].message


def _spin(seconds: float) -> None:
    """Work the CPU for `seconds` of this process's CPU time (what the campaign measures)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_decoder_checker_catches_a_slow_input() -> None:
    tally = fuzz.Tally("decoder", 0, 1, time_limit=0.005)
    found = planted_decoders(tally, lambda data: _spin(0.02))
    assert found and all("took" in v.message for v in found)


def test_the_decoder_checker_catches_a_memory_hog() -> None:
    tally = fuzz.Tally("decoder", 0, 1, memory_limit=2**20)
    found = planted_decoders(tally, lambda data: len(bytearray(4 * 2**20)) and None)
    assert found and all("MiB" in v.message for v in found)


def test_the_decoder_checker_catches_an_unregistered_class_restored() -> None:
    tally = fuzz.Tally("decoder", 0, 1)
    fuzz.decode_trial(tally, "0.0", "unregistered", b"\x90", {"lenient": lambda data: "obj"})
    assert [v.message for v in tally.violations] == [
        "lenient() restored a class that is not registered"
    ]


def test_a_hang_is_interrupted() -> None:
    start = time.perf_counter()
    got = fuzz.probe(lambda: time.sleep(2 * WAIT), hang=0.05)
    # Interrupted, not waited out (WAIT: a bound however slow the machine).
    assert isinstance(got.error, fuzz.Hang) and time.perf_counter() - start < WAIT


class Lenient(Runtime):
    """Accepts any token."""

    def resume(self, token, value=None, **kwargs):
        return "accepted"


class Meddling(Runtime):
    """Once armed, refuses every cancel, but deletes a session first."""

    armed = False

    def cancel(self, token_or_session_id):
        if not self.armed:
            return super().cancel(token_or_session_id)
        self.store.delete(self.store.list(limit=1)[0].session_id)
        raise tarry.UnknownToken()


class Vague(Runtime):
    """Refuses tokens with the wrong error."""

    def skip(self, token, output=None, **kwargs):
        raise tarry.SessionNotResumable("s", "paused", "skip")


@pytest.mark.parametrize(
    ("runtime", "method", "message"),
    [
        (Lenient, "resume", "accepted a token it never issued"),
        (
            Meddling,
            "",
            "refused it, as resume() (UnknownToken), skip() (UnknownToken), "
            "cancel() (UnknownToken), but the store changed",
        ),
        (Vague, "skip", "raised SessionNotResumable, expected UnknownToken"),
    ],
)
def test_the_token_checker_catches_a_planted_fault(runtime, method, message) -> None:
    tally = fuzz.Tally("tokens", 0, 1)
    pool = fuzz.Pool(runtime(flows=fuzz.FLOWS.values()), "planted")
    pool.rt.armed = True
    fuzz.token_trial(tally, "0.0", pool, ("tk_", "nobody-issued-this"))
    found = [v.message for v in tally.violations]
    assert found == [f"planted {method}() {message}" if method else f"planted {message}"]


class UsesTokenThenRefuses(Runtime):
    def resume(self, token, value=None, **kwargs):
        super().resume(token, value)
        raise tarry.InvalidResumeValue("too late")


class StoresSomethingElse(Runtime):
    def resume(self, token, value=None, **kwargs):
        return super().resume(token, "something else" if value != "something else" else 0)


class WavesDecisionsThrough(Runtime):
    def resume(self, token, value=None, **kwargs):
        return super().resume(token, True)


@pytest.mark.parametrize(
    ("runtime", "site", "value", "message"),
    [
        (
            UsesTokenThenRefuses,
            "wait",
            1,
            "refused (InvalidResumeValue: too late) but the store changed",
        ),
        (StoresSomethingElse, "interrupt", [1, 2], "stored 'something else', not the value given"),
        (WavesDecisionsThrough, "gate", "yes", "accepted a decision API.md rejects"),
    ],
)
def test_the_value_checker_catches_a_planted_fault(runtime, site, value, message) -> None:
    tally = fuzz.Tally("values", 0, 1)
    pool = fuzz.Pool(runtime(flows=fuzz.FLOWS.values()), "planted")
    fuzz.value_trial(tally, "0.0", pool, site, value)
    assert any(message in v.message for v in tally.violations), tally.violations


def test_the_value_checker_passes_a_good_value() -> None:
    tally = fuzz.Tally("values", 0, 1)
    pool = fuzz.Pool(Runtime(flows=fuzz.FLOWS.values()), "memory")
    for site in fuzz.SITES:
        fuzz.value_trial(tally, "0.0", pool, site, {"approved": True, "by": "ann"})
    assert tally.violations == [] and tally.ends["returned"] == len(fuzz.SITES)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (httpx.Response(500, json={"error": "boom"}), "HTTP 500"),
        (httpx.Response(200, text="ok"), "body not strict JSON"),
        (
            httpx.Response(
                200, content=b'{"output": NaN}', headers={"content-type": "application/json"}
            ),
            "body not strict JSON (NaN is not JSON)",
        ),
        (httpx.Response(302, json={}), "HTTP 302"),
    ],
)
def test_the_http_checker_catches_a_bad_answer(answer, message) -> None:
    tally = fuzz.Tally("http", 0, 1)
    pool = fuzz.Pool(Runtime(flows=fuzz.FLOWS.values()), "memory")
    got = fuzz.Probe(answer, None, 0.0, 0)
    fuzz.check_answer(tally, "0.0", pool, "planted", got, pool.image(), "input")
    assert any(message in v.message for v in tally.violations), tally.violations


def test_the_http_checker_catches_a_refusal_that_changed_the_store() -> None:
    tally = fuzz.Tally("http", 0, 1)
    pool = fuzz.Pool(Runtime(flows=fuzz.FLOWS.values()), "memory")
    before = pool.image()
    pool.rt.cancel(pool.live["wait"].token)
    got = fuzz.Probe(httpx.Response(409, json={"error": "SessionNotResumable"}), None, 0.0, 0)
    fuzz.check_answer(tally, "0.0", pool, "planted", got, before, "input")
    assert len(tally.violations) == 1
    assert tally.violations[0].message.endswith("but the store changed")


def test_the_http_target_reports_every_answer_of_a_broken_app() -> None:
    async def broken(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"down"})

    tally = fuzz.Tally("http", 0, 10)
    fuzz.http_target(
        tally,
        [("memory", lambda: Runtime(flows=fuzz.FLOWS.values()))],
        app_factory=lambda rt, token: broken,
    )
    assert tally.inputs == 10
    assert sum("HTTP 503" in v.message for v in tally.violations) == 2 * tally.inputs


def test_known_bugs_are_told_from_new_ones(monkeypatch) -> None:
    monkeypatch.setattr(fuzz, "KNOWN", (fuzz.Known("deep-json-500", r"HTTP 500 .*'deep'", "t"),))
    known = fuzz.Violation(
        "http",
        "1.0",
        "HTTP 500 from x: 'Internal Server Error'",
        "('memory', '/api/resume', 'deep', 9)",
    )
    new = fuzz.Violation(
        "http",
        "1.0",
        "HTTP 500 from x: 'Internal Server Error'",
        "('memory', '/api/resume', 'bytes', 9)",
    )
    assert fuzz.known_bug(known) == "deep-json-500" and fuzz.known_bug(new) is None
    examples = fuzz.examples([known, new, new], seed=3, budget=7)
    assert len(examples) == 2 and examples[0].startswith("[NEW] http trial 1.0")
    assert "--seed 3 --budget 7" in examples[0]


def test_same_keeps_types_apart_and_nan_equal() -> None:
    nan = float("nan")
    assert fuzz.same([nan, {"k": (1, nan)}], [float("nan"), {"k": (1, float("nan"))}])
    assert not fuzz.same([True], [1]) and not fuzz.same((1,), [1])
    assert not fuzz.same({1}, frozenset({1})) and fuzz.same(fuzz.Text("a"), "a")
    assert fuzz.same(fuzz.nest(1500, "mix", 1), fuzz.nest(1500, "mix", 1))


def test_altered_text_always_differs() -> None:
    for how in fuzz.MUTATIONS:
        for text in ("tk_abc", "A", "tk_"):
            for at in range(4):
                assert fuzz.alter(text, how, at, text[at % len(text)]) != text, (how, text, at)


# --- tokens: focused checks ----------------------------------------------------------------------

URLSAFE_AND_DOT = fuzz.URLSAFE + "."


@pytest.mark.parametrize("secret", [None, fuzz.SECRET])
def test_a_real_token_with_any_character_changed_is_unknown(secret) -> None:
    """Every position, and every character at the tail (where a signature is, if any)."""
    pool = fuzz.Pool(Runtime(flows=fuzz.FLOWS.values(), secret=secret), "memory")
    token = pool.live["gate"].token
    before = pool.image()
    altered = {
        token[:i] + c + token[i + 1 :] for i in range(len(token)) for c in ("A", "z", "-", ".")
    }
    altered |= {
        token[:i] + c + token[i + 1 :]
        for i in range(len(token) - 6, len(token))
        for c in URLSAFE_AND_DOT
    }
    altered |= {token[:-1], token + "A", token + "=", token.upper(), f" {token}"}
    altered.discard(token)
    for given in sorted(altered):
        for method in (pool.rt.resume, pool.rt.skip):
            with pytest.raises(tarry.UnknownToken):
                method(given)
    assert pool.image() == before
    assert pool.rt.resume(token, True).ok


def test_a_token_signed_with_another_secret_is_unknown() -> None:
    shared = tarry.snapshots.MemoryStore()
    first = Runtime(shared, flows=fuzz.FLOWS.values(), secret=fuzz.SECRET)
    other = Runtime(shared, flows=fuzz.FLOWS.values(), secret=b"another-secret-0123456789")
    token = first.run(fuzz.FLOWS["wait"]).token
    with pytest.raises(tarry.UnknownToken):
        other.resume(token, 1)
    assert first.resume(token, 1).ok


def test_cancel_of_a_value_that_is_not_a_string_is_a_typed_error() -> None:
    rt = Runtime()
    for given in ([1], {}, None, 3, b"tk_x"):
        with pytest.raises(tarry.TarryError):
            rt.cancel(given)


# --- the decoder: focused checks -----------------------------------------------------------------


def test_a_snapshot_naming_an_unregistered_class_is_refused() -> None:
    rt = Runtime()
    out = rt.run(Flow("keeps-a-parcel", [lambda ctx: fuzz.Parcel("p", 1), Wait("w")]))
    blob = rt.store.load(out.session_id).state
    assert decode_state(blob).outputs["<lambda>"] == fuzz.Parcel("p", 1)  # registered: fine
    registered = f"{fuzz.Parcel.__module__}.{fuzz.Parcel.__qualname__}".encode()
    doctored = blob.replace(registered, registered[:-1] + b"X")  # same length, unknown name
    assert doctored != blob
    with pytest.raises(tarry.SnapshotError, match="not registered"):
        decode_state(doctored)


def test_a_decoded_corpus_snapshot_encodes_again() -> None:
    states = [b for b in fuzz.corpus() if b[:1] == b"\x85"]  # an envelope: a map of 5
    assert states
    for blob in states:
        assert decode_state(encode_state(decode_state(blob))) == decode_state(blob)


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
@pytest.mark.parametrize("harness", ["decoder", "tokens"])
def test_the_atheris_harness_runs(harness) -> None:
    # a generous bound per input: this checks the harness works, on however busy a machine
    report = fuzz.run_atheris(harness, 1500, seed=0, timeout=60, per_input=20)
    assert report["crash"] is None, report["crash"]
    assert report["runs"] == 1500 and report["coverage"] > 0, report


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed")
def test_an_atheris_crash_is_reported_with_its_input_kept() -> None:
    report = fuzz.run_atheris("planted", 100, seed=0, timeout=60, per_input=20)
    assert report["crash"] is not None and "ValueError: planted crash" in report["crash"]
    kept = Path(report["crash"].rsplit("[input kept in ", 1)[1].rstrip("]"))
    try:
        assert [p.name.startswith("atheris-planted-crash-") for p in kept.iterdir()] == [True]
    finally:
        shutil.rmtree(kept)


# --- regressions: the bugs the campaign found ----------------------------------------------------


@pytest.mark.parametrize(("store", "site"), [("memory", "nested"), ("sqlite", "wait")])
def test_a_value_too_deep_for_the_snapshot_is_refused_before_the_token_is_used(
    tmp_path, store, site
) -> None:
    url = f"sqlite:///{tmp_path / 'fuzz.db'}" if store == "sqlite" else None
    pool = fuzz.Pool(Runtime(url, flows=fuzz.FLOWS.values()), store)
    for depth in range(1000, 1030):
        out = pool.live[site]
        before = pool.image()
        try:
            pool.rt.resume(out.token, fuzz.nest(depth, "list", None))
        except tarry.TarryError:
            assert pool.image() == before, f"depth {depth}: refused, but the token was used"
            continue
        pool.retire(site)


def test_a_deeply_nested_json_body_is_a_400() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    answer = post(Runtime(flows=fuzz.FLOWS.values()), "/api/resume", deep)
    assert answer.status_code == 400


def test_json_answers_are_strict_json_even_for_huge_numbers() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values())
    sid = rt.run(fuzz.FLOWS["wait"]).session_id
    answer = post(rt, f"/api/sessions/{sid}/resume", b'{"value": 1e400}')
    assert answer.status_code < 500
    fuzz.strict_json(answer.text)


def test_sqlite_store_refuses_a_token_with_lone_surrogates_with_a_typed_error(tmp_path) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'fuzz.db'}")
    for given in ("tk_\ud800", "\udfff"):
        with pytest.raises(tarry.TarryError):
            rt.resume(given)
        with pytest.raises(tarry.TarryError):
            rt.cancel(given)


def test_a_signed_token_with_a_non_ascii_signature_is_unknown() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values(), secret=fuzz.SECRET)
    token = rt.run(fuzz.FLOWS["wait"]).token
    with pytest.raises(tarry.UnknownToken):
        rt.resume(token[:-1] + "\u00e9")


def test_a_deeply_nested_value_is_refused_with_a_typed_error() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values())
    deep = fuzz.nest(5000, "list", None)
    with pytest.raises(tarry.InvalidArgument):
        rt.cancel(deep)
    with pytest.raises(tarry.InvalidResumeValue):
        rt.resume(rt.run(fuzz.FLOWS["gate"]).token, deep)


def test_a_value_holding_a_huge_int_is_refused_with_a_typed_error() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values())
    with pytest.raises(tarry.InvalidResumeValue):
        rt.resume(rt.run(fuzz.FLOWS["gate"]).token, {"approved": True, "by": 10**5000})


def test_an_error_message_stays_small_however_large_the_input() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values())
    huge = "\x00" * 2**20
    with pytest.raises(tarry.UnknownSession) as unknown:
        rt.cancel(huge)
    with pytest.raises(tarry.InvalidResumeValue) as refused:
        rt.resume(rt.run(fuzz.FLOWS["gate"]).token, huge)
    assert len(str(unknown.value)) < 10_000 and len(str(refused.value)) < 10_000


def post(rt: Runtime, path: str, body: bytes) -> httpx.Response:
    import asyncio

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(
            app=create_app(rt), raise_app_exceptions=False, client=("127.0.0.1", 50000)
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.post(path, content=body)

    return asyncio.run(send())


def test_the_campaign_flows_stop_where_the_values_target_expects() -> None:
    rt = Runtime(flows=fuzz.FLOWS.values())
    pauses = {site: rt.run(flow).pause for site, flow in fuzz.FLOWS.items() if site != "failed"}
    assert pauses["gate"].kind == "human" and pauses["wait"].kind == "external"
    assert pauses["nested"].path == ("items", 0, "w")
    assert rt.run(fuzz.FLOWS["failed"]).failed
