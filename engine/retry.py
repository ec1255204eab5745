"""Retry policies: how many attempts, and how long to wait before each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from tarry.engine.errors import InvalidFlow, NotSendable

if TYPE_CHECKING:
    import random

BACKOFFS = ("exponential", "linear", "fixed")


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        msg = f"Retry {attribute.name} must be a number >= 0 (got {value!r})"
        raise InvalidFlow(msg)


def _exceptions(value: Any) -> tuple[type[BaseException], ...]:
    """`on=`: one exception class, or a list or tuple of them."""
    return tuple(value) if isinstance(value, list | tuple) else (value,)


@attrs.frozen
class Retry:
    """Retry a failing step: `attempts` in all (first try included).

    The delay before attempt n+1 is `initial` (fixed), `initial * n` (linear) or
    `initial * multiplier**(n-1)` (exponential), capped at `max_delay`; with `jitter`, a random
    value in [delay/2, delay]. Only exceptions matching `on` are retried. Delays shorter than
    `durable_after` seconds wait in place; longer ones pause the session until they are due.
    """

    attempts: int = attrs.field(default=3)
    backoff: str = attrs.field(default="exponential")
    initial: float = attrs.field(default=1.0, validator=_positive)
    multiplier: float = attrs.field(default=2.0, validator=_positive)
    max_delay: float = attrs.field(default=60.0, validator=_positive)
    jitter: bool = True
    on: tuple[type[BaseException], ...] = attrs.field(default=(Exception,), converter=_exceptions)
    durable_after: float = attrs.field(default=5.0, validator=_positive)

    @attempts.validator
    def _check_attempts(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            msg = f"Retry attempts must be an int >= 1 (got {value!r})"
            raise InvalidFlow(msg)

    @backoff.validator
    def _check_backoff(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in BACKOFFS:
            msg = f"Retry backoff must be one of {BACKOFFS} (got {value!r})"
            raise InvalidFlow(msg)

    def retries(self, exc: BaseException) -> bool:
        # A step its executor cannot take fails again however often it is sent.
        return isinstance(exc, self.on) and not isinstance(exc, NotSendable)

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after attempt number `failed_attempt` (1-based) failed."""
        if self.backoff == "fixed":
            base = self.initial
        elif self.backoff == "linear":
            base = self.initial * failed_attempt
        else:
            base = self.initial * self.multiplier ** (failed_attempt - 1)
        base = min(base, self.max_delay)
        if self.jitter and base > 0:
            if rng is None:
                import random  # only for jitter: `import tarry` does not load it

                return random.uniform(base / 2, base)
            return rng.uniform(base / 2, base)
        return base
