"""The mailbox's records: a queued message, and a key of the mailbox with its count.

A module of their own, loaded with the stores (not with `import tarry`): attrs builds each record
class when its module loads, and a run that never touches the mailbox need not pay for them.
"""

from __future__ import annotations

import datetime as dt

import attrs


@attrs.frozen
class MailRecord:
    """One queued message: its id (ids only grow: FIFO order), key, encoded value, when it was
    posted, and the busy session it is meant for (`target`, see `SessionStore.post`)."""

    id: int
    key: str
    value: bytes
    at: dt.datetime
    target: str | None = None


@attrs.frozen
class MailInfo:
    """A key of the mailbox: how many messages it holds unclaimed, and when the oldest came."""

    key: str
    count: int
    oldest_at: dt.datetime
