"""Resume tokens: 256 random bits, single use, never in events or logs, and with
`Runtime(secret=...)` signed, so that what a store holds is not enough to resume a session."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
import tarry
from tarry import (
    NOT_READY,
    Flow,
    Gate,
    InvalidArgument,
    ManualClock,
    ResumeRequest,
    Runtime,
    Sleep,
    TokenAlreadyUsed,
    UnknownToken,
    Wait,
)
from tarry.drivers.tokens import Tokens
from tarry.snapshots import MemoryStore, SQLiteStore

SECRET = b"0123456789abcdef0123456789abcdef"
OTHER = b"fedcba9876543210fedcba9876543210"


def gated() -> Flow:
    return Flow("gated", [lambda ctx: "before", Gate("approve", "ship it?"), lambda ctx: "after"])


def stored(rt: Runtime, sid: str) -> tuple:
    view = rt.session(sid)
    return (view.status, view.state, view.events(), rt.store.load(sid).token)


# --- entropy and shape -------------------------------------------------------------------------


def test_tokens_carry_256_random_bits_and_never_repeat(rt: Runtime) -> None:
    flow = gated()
    seen = set()
    for _ in range(200):
        token = rt.run(flow).token
        body = token.removeprefix("tk_")
        assert len(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))) == 32
        seen.add(token)
    assert len(seen) == 200


def test_without_a_secret_the_token_is_the_store_key(rt: Runtime) -> None:
    out = rt.run(gated())
    assert rt.store.load(out.session_id).token == out.token


# --- signed tokens -----------------------------------------------------------------------------


def test_a_signed_token_resumes_and_the_store_holds_only_its_key(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    rt = Runtime(store=f"sqlite:///{path}", secret=SECRET)
    out = rt.run(gated())
    key = rt.store.load(out.session_id).token
    assert out.token.startswith(key + ".") and len(out.token) > len(key) + 40
    assert rt.session(out.session_id).outcome.token == out.token  # minted again from the key

    # Nothing the store wrote contains the token or its signature: not the sessions, not the
    # events, not the WAL.
    rt.store.close()
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert key.encode() in blob and out.token.encode() not in blob
    mac = out.token.rsplit(".", 1)[1].encode()
    assert mac not in blob

    later = Runtime(store=f"sqlite:///{path}", flows=[gated()], secret=SECRET)
    assert later.resume(out.token, {"approved": True}).output == "after"


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda token, key: key, id="the stored key alone"),
        pytest.param(lambda token, key: key + ".", id="key and empty signature"),
        pytest.param(
            lambda token, key: token[:-1] + ("A" if token[-1] != "A" else "B"), id="one char off"
        ),
        pytest.param(lambda token, key: token[:-4], id="truncated"),
        pytest.param(lambda token, key: token + "A", id="extended"),
        pytest.param(lambda token, key: Tokens(OTHER).token(key), id="signed with another secret"),
        pytest.param(lambda token, key: token.replace(".", "", 1), id="separator removed"),
    ],
)
def test_forged_tokens_are_unknown_and_change_nothing(forge) -> None:
    rt = Runtime(secret=SECRET)
    out = rt.run(gated())
    key = rt.store.load(out.session_id).token
    before = stored(rt, out.session_id)
    forged = forge(out.token, key)
    assert forged != out.token
    for attempt in (
        lambda: rt.resume(forged, {"approved": True}),
        lambda: rt.skip(forged),
        lambda: rt.cancel(forged),
    ):
        with pytest.raises(UnknownToken):
            attempt()
    assert stored(rt, out.session_id) == before
    assert rt.resume(out.token, {"approved": True}).output == "after"


def _signed_store(kind: str, tmp_path: Path):
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "signed.db")
    import pgserver

    return pgserver.scratch_store()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_process_without_the_secret_refuses_a_signed_store(kind: str, tmp_path: Path) -> None:
    store = _signed_store(kind, tmp_path)
    clock = ManualClock()
    rt = Runtime(store=store, secret=SECRET, clock=clock)
    napper = Flow("napper", [Sleep("nap", seconds=5), lambda ctx: "awake"])
    out = rt.run(gated())
    asleep = rt.run(napper)
    key = rt.store.load(out.session_id).token
    before = stored(rt, out.session_id)

    # Started later without the secret (a forgotten TARRY_SECRET): it neither takes the
    # store's keys as tokens nor hands them out, nor adds unsigned sessions to the store.
    unsigned = Runtime(store=store, flows=[gated(), napper], clock=clock)
    for attempt in (
        lambda: unsigned.resume(key, {"approved": True}),
        lambda: unsigned.resume(out.token, {"approved": True}),
        lambda: unsigned.skip(key),
        lambda: unsigned.cancel(key),
        lambda: unsigned.session(out.session_id).outcome,
        lambda: unsigned.run(gated()),
        lambda: unsigned.resume_due(),
        lambda: unsigned.poll(),
        lambda: unsigned.recover(),
    ):
        with pytest.raises(tarry.SecretRequired, match="TARRY_SECRET"):
            attempt()
    assert stored(rt, out.session_id) == before
    assert len(rt.sessions(limit=10)) == 2
    clock.advance(10)
    with pytest.raises(tarry.SecretRequired):
        unsigned.resume_due()
    assert rt.session(asleep.session_id).status == "paused"

    # Reading the store is still allowed, and the secret's holder goes on as before.
    assert unsigned.session(out.session_id).status == "paused"
    assert rt.resume(out.token, {"approved": True}).output == "after"
    [woke] = rt.resume_due()
    assert woke.output == "awake"
    if kind != "memory":
        store.close()


def test_a_process_that_found_the_store_unsigned_sees_the_mark_within_a_second(
    monkeypatch,
) -> None:
    from tarry.drivers import tokens

    now = [1000.0]
    monkeypatch.setattr(tokens, "_monotonic", lambda: now[0])
    unsigned = Runtime()
    first = unsigned.run(gated())  # the store is unmarked: unsigned tokens, as ever
    assert first.token == unsigned.store.load(first.session_id).token
    Runtime(store=unsigned.store, secret=SECRET).run(gated())  # marks the store
    now[0] += tokens.RECHECK_SECONDS
    with pytest.raises(tarry.SecretRequired):
        unsigned.resume(first.token, {"approved": True})


def test_rotation_signs_with_the_first_secret_and_accepts_the_others() -> None:
    old = Runtime(secret=OTHER)
    first = old.run(gated())
    rotated = Runtime(store=old.store, flows=[gated()], secret=[SECRET, OTHER])
    second = rotated.run(gated())
    assert second.token == Tokens(SECRET).token(rotated.store.load(second.session_id).token)
    assert rotated.resume(first.token, {"approved": True}).ok
    assert rotated.resume(second.token, {"approved": True}).ok
    dropped = Runtime(store=old.store, flows=[gated()], secret=SECRET)
    third = dropped.run(gated())
    with pytest.raises(UnknownToken):
        Runtime(store=old.store, flows=[gated()], secret=OTHER).resume(third.token, True)


def test_signatures_are_compared_in_constant_time(monkeypatch) -> None:
    import hmac  # the tokens module imports it when it first checks a signed token

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    tokens = Tokens([SECRET, OTHER])
    key = tokens.new_key()
    assert tokens.key(tokens.token(key)) == key
    assert tokens.key(key + ".bad") is None
    # Every secret is tried every time, so timing does not tell which one matched.
    assert len(calls) == 4


def test_a_used_signed_token_is_already_used() -> None:
    rt = Runtime(secret=SECRET)
    out = rt.run(gated())
    rt.resume(out.token, {"approved": True})
    with pytest.raises(TokenAlreadyUsed):
        rt.resume(out.token, {"approved": True})


@pytest.mark.parametrize(
    "secret",
    [b"", "short", b"x" * 15, 42, [], [SECRET, b"tiny"], object()],
)
def test_a_bad_secret_is_refused(secret) -> None:
    with pytest.raises(InvalidArgument, match="secret"):
        Runtime(secret=secret)


def test_a_str_secret_is_its_utf8_bytes() -> None:
    key = Tokens(SECRET).new_key()
    assert Tokens(SECRET.decode()).token(key) == Tokens(SECRET).token(key)


@pytest.mark.parametrize("junk", [None, 42, b"tk_abc", "tk_" + "A" * 500, "", "tk_", "tk_\udcff.x"])
def test_junk_is_an_unknown_token(junk) -> None:
    for rt in (Runtime(), Runtime(secret=SECRET)):
        with pytest.raises(UnknownToken):
            rt.resume(junk)


def test_cancel_takes_a_signed_token_or_the_session_id() -> None:
    rt = Runtime(secret=SECRET)
    a, b = rt.run(gated()), rt.run(gated())
    assert rt.cancel(a.token).error.type == "cancelled"
    assert rt.cancel(b.session_id).error.type == "cancelled"
    with pytest.raises(InvalidArgument):
        rt.cancel(42)  # type: ignore[arg-type]


# --- tokens never leak -------------------------------------------------------------------------


def _everything_logged_and_recorded(rt: Runtime, caplog) -> tuple[list[str], str]:
    """Drive gates, a timer, a failing and a refusing adapter; return every token issued and
    all text that went to logs or events."""
    issued: list[str] = []

    def failing(request: ResumeRequest) -> object:
        raise RuntimeError(f"batch API down while asking about {request!r}")

    def refusing(request: ResumeRequest) -> object:
        issued.append(request.token)
        return "not a decision" if len(issued) % 2 else NOT_READY  # a gate refuses the str

    rt.adapters = {"human": refusing, "external": failing}
    caplog.set_level(logging.DEBUG)
    flows = [
        gated(),
        Flow("napper", [Sleep("nap", seconds=5), lambda ctx: "awake"]),
        Flow("waiter", [Wait("batch", kind="external", reason="results")]),
    ]
    for flow in flows:
        rt.register(flow)
    gate = rt.run(flows[0])
    issued.append(gate.token)
    issued.append(rt.run(flows[1]).token)
    issued.append(rt.run(flows[2]).token)
    rt.poll()
    rt.clock.advance(10)
    rt.poll()
    done = rt.resume(gate.token, {"approved": True})
    assert done.ok
    text = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    events = []
    for summary in rt.sessions(limit=100):
        events += [repr(e) for e in rt.session(summary.session_id).events()]
    return issued, "\n".join(text + events)


@pytest.mark.parametrize("secret", [None, SECRET])
def test_tokens_never_appear_in_events_or_logs(secret, caplog) -> None:
    rt = Runtime(clock=ManualClock(), secret=secret)
    issued, text = _everything_logged_and_recorded(rt, caplog)
    assert len(set(issued)) >= 3
    assert "batch API down" in text and "refused" in text  # adapters' troubles were logged ...
    for token in issued:
        assert token not in text  # ... without the token it was asked about
        assert token.split(".")[0] not in text


def test_a_resume_request_does_not_show_its_token() -> None:
    request = ResumeRequest("tk_secret", "s1", "external", "batch", None, ("batch",))
    assert "tk_secret" not in repr(request) and "s1" in repr(request)


def test_the_module_level_run_uses_unsigned_tokens_unless_asked() -> None:
    out = tarry.run(gated())
    assert "." not in out.token


def test_b64url_is_urlsafe_base64_without_padding() -> None:
    from tarry.drivers.tokens import b64url

    # Every length mod 3, and bytes whose standard encoding has "+" and "/".
    for data in [b"", b"\xfb", b"\xfb\xff", b"\xfb\xff\xbf", bytes(range(256)), b"\xff" * 31]:
        assert b64url(data) == base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
