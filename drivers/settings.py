"""What a Runtime runs on, read back: its store, clock, tokens and settings (Runtime's base)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tarry.drivers.clock import Clock
from tarry.drivers.core import Core, checked_adapters
from tarry.drivers.registry import FlowRegistry
from tarry.drivers.tokens import Tokens
from tarry.engine.retry import Retry
from tarry.snapshots.store import SessionStore


class Settings:
    """The read-only view of a Runtime's `Core` (and the one setting it may change later,
    `adapters`)."""

    __slots__ = ()
    _core: Core

    # -- what it runs on -----------------------------------------------------------------------
    @property
    def store(self) -> SessionStore:
        return self._core.store

    @property
    def flows(self) -> FlowRegistry:
        """The flows this Runtime knows (`get(name)`, `version(name, fingerprint)`, `all()`)."""
        return self._core.flows

    @property
    def clock(self) -> Clock:
        return self._core.clock

    @property
    def tokens(self) -> Tokens:
        """Mints tokens and checks them (signed with `secret` when one is given)."""
        return self._core.tokens

    @property
    def durability(self) -> str:
        return self._core.durability

    @property
    def lease(self) -> float:
        """Seconds a running session's lease lasts; renewed at checkpoints."""
        return self._core.lease

    @property
    def owner(self) -> str:
        """This runtime's name on the leases it holds."""
        return self._core.owner

    @property
    def retry(self) -> Retry | None:
        """The retry policy of steps that have none of their own."""
        return self._core.retry

    @property
    def adapters(self) -> dict[str, Any]:
        """{pause kind: adapter} that `poll()` asks."""
        return self._core.adapters

    @adapters.setter
    def adapters(self, adapters: dict[str, Any]) -> None:
        self._core.adapters = checked_adapters(adapters)

    @property
    def max_value_bytes(self) -> int:
        return self._core.max_value_bytes

    @property
    def max_snapshot_bytes(self) -> int:
        return self._core.max_snapshot_bytes

    @property
    def retention(self) -> timedelta | None:
        """How long ended sessions are kept before workers prune them (None: forever)."""
        return self._core.retention
