"""Random sequences of saves with waits, token uses (some consuming a message), posts, claims,
saves that consume claims, discards and session ends, run against each store and against a
model made of dicts: both must agree after every step."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storekit import STORES
from tarry.snapshots import WaitRecord

SESSIONS = ("s0", "s1", "s2")
KEYS = ("k0", "k1", "k2")

operation = st.one_of(
    st.tuples(st.just("pause"), st.sampled_from(SESSIONS), st.lists(
        st.sampled_from((None, *KEYS)), min_size=1, max_size=3)),
    st.tuples(st.just("use"), st.integers(0, 30)),
    st.tuples(st.just("use_many"), st.lists(st.integers(0, 30), min_size=1, max_size=4)),
    st.tuples(st.just("post"), st.sampled_from(KEYS), st.binary(max_size=3)),
    st.tuples(st.just("claim"), st.sampled_from(KEYS), st.sampled_from(SESSIONS)),
    st.tuples(st.just("done"), st.sampled_from(SESSIONS), st.booleans()),
    st.tuples(st.just("use_mail"), st.integers(0, 30), st.sampled_from(KEYS)),
    st.tuples(st.just("discard"), st.sampled_from(KEYS)),
    st.tuples(st.just("end"), st.sampled_from(SESSIONS)),
)  # fmt: skip


class Model:
    """What a store must hold, in plain dicts."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self.status: dict[str, str] = {}
        self.tokens: dict[str, tuple[str, bool]] = {}  # token -> (session, used)
        self.waits: dict[str, WaitRecord] = {}
        # message id -> [key, value, claimant or ""]; ids in the order the store gave them
        self.mail: dict[int, list[Any]] = {}

    def queue(self, key: str) -> list[int]:
        return [m for m, (k, _, who) in self.mail.items() if k == key and who == ""]

    def use(self, token: str) -> None:
        self.tokens[token] = (self.tokens[token][0], True)
        self.waits.pop(token, None)
        self.status[self.tokens[token][0]] = "running"


def step(store: Any, model: Model, op: tuple[Any, ...], serial: list[int]) -> None:
    name = op[0]
    tokens = sorted(model.tokens)
    if name == "pause":
        _, sid, keys = op
        if sid not in model.versions:
            store.create(support.rec(sid))
            model.versions[sid] = 0
        waits = []
        for key in keys:
            serial[0] += 1
            waits.append(WaitRecord(f"t{serial[0]:03}", sid, ("w", serial[0]), "external", key))
        record = support.rec(sid, status="paused", token=waits[0].token)
        model.versions[sid] = store.save(record, model.versions[sid], waits=waits)
        model.status[sid] = "paused"
        for wait in waits:
            model.tokens[wait.token] = (sid, False)
            model.waits[wait.token] = wait
    elif name == "use":
        token = tokens[op[1] % len(tokens)] if tokens else "nope"
        expected = token in model.tokens and not model.tokens[token][1]
        assert store.consume_token(token) is expected
        if expected:
            model.use(token)
    elif name == "use_many":
        batch = [tokens[i % len(tokens)] if tokens else "nope" for i in op[1]]
        refused: dict[str, str] = {}
        for i, token in enumerate(batch):
            if token in batch[:i]:
                refused[token] = "duplicate"
            elif token not in model.tokens:
                refused[token] = "unknown"
            elif model.tokens[token][1]:
                refused[token] = "used"
        assert store.consume_tokens(batch) == refused
        if not refused:
            for token in batch:
                model.use(token)
    elif name == "post":
        _, key, value = op
        mid = store.post(key, value, support.at(1))
        assert all(mid > m for m in model.mail)
        model.mail[mid] = [key, value, ""]
    elif name == "claim":
        _, key, sid = op
        mine = [m for m, (k, _, who) in model.mail.items() if k == key and who == sid]
        queue = model.queue(key)
        expected = min(mine) if mine else (queue[0] if queue else None)
        found = store.claim_mail(key, sid)
        if expected is None:
            assert found is None
        else:
            assert found == (expected, model.mail[expected][1])
            model.mail[expected][2] = sid
    elif name == "done":
        _, sid, consume = op
        if sid not in model.versions:
            return
        mine = sorted(m for m, (_, _, who) in model.mail.items() if who == sid)
        done = mine[:1] if consume else []
        status = model.status[sid]
        record = support.rec(sid, status=status, token=None)
        model.versions[sid] = store.save(record, model.versions[sid], mail_done=done)
        for m in mine:
            if m in done:
                del model.mail[m]
            else:
                model.mail[m][2] = ""
    elif name == "use_mail":
        _, i, key = op
        token = tokens[i % len(tokens)] if tokens else "nope"
        queue = model.queue(key)
        if not queue or token not in model.tokens or model.tokens[token][1]:
            return
        assert store.consume_token(token, mail=queue[0]) is True
        model.use(token)
        del model.mail[queue[0]]
    elif name == "discard":
        queue = model.queue(op[1])
        assert store.discard(op[1]) == len(queue)
        for m in queue:
            del model.mail[m]
    elif name == "end":
        sid = op[1]
        if sid not in model.versions:
            return
        model.versions[sid] = store.save(support.rec(sid, status="completed"), model.versions[sid])
        model.status[sid] = "completed"
        for token, wait in list(model.waits.items()):
            if wait.session_id == sid:
                model.use(token)
        model.status[sid] = "completed"
        for message in model.mail.values():  # an ended session's claims are released
            if message[2] == sid:
                message[2] = ""


def agree(store: Any, model: Model) -> None:
    assert store.waiting() == sorted(model.waits.values(), key=lambda w: w.token)
    for key in KEYS:
        assert [(m.id, m.value) for m in store.queued(key=key)] == [
            (m, model.mail[m][1]) for m in model.queue(key)
        ]
    for token, (sid, used) in model.tokens.items():
        info = store.find_token(token)
        assert (info.session_id, info.used) == (sid, used), token
    for sid in model.versions:
        mine = sorted((w for w in model.waits.values() if w.session_id == sid), key=_path)
        assert store.waits(sid) == mine


def _path(wait: WaitRecord) -> tuple[Any, ...]:
    from tarry.snapshots.records import encode_path

    return (encode_path(wait.path), wait.token)


@pytest.mark.parametrize("kind", sorted(STORES))
def test_stores_agree_with_the_model(kind: str) -> None:
    @settings(
        max_examples=40 if kind == "memory" else 15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(operation, max_size=25))
    def check(ops: list[tuple[Any, ...]]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = STORES[kind](Path(tmp))
            try:
                model, serial = Model(), [0]
                for op in ops:
                    step(store, model, op, serial)
                    agree(store, model)
            finally:
                close = getattr(store, "close", None)
                if close is not None:
                    close()

    check()
