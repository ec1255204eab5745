"""describe: a short, safe repr of a value for an error message.

Error messages name the value that was refused, and that value may come from anywhere: a
resume value, a request body, a session id typed by a user. A plain `repr` of it can be as
large as the value (a 10 MB string makes a 10 MB message), fail outright (a list nested
deeper than the recursion limit raises RecursionError; an int of more than 4,300 digits
raises ValueError), or run a user's `__repr__`. `describe` bounds all three.
"""

from __future__ import annotations

import reprlib
from typing import Any


class _Short(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int of more than 4,300 digits raises ValueError.
        if x.bit_length() > 256:
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()
_SHORT.maxlevel = 3
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlong = 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = _SHORT.maxfrozenset = 6

#: Longest result, whatever the value.
LIMIT = 200


def describe(value: Any) -> str:
    """A repr of `value` of at most LIMIT characters, never raising."""
    try:
        text = _SHORT.repr(value)
    except (ValueError, RecursionError):
        if type(value) is int:
            text = f"<int of {value.bit_length()} bits>"
        else:
            text = f"<{type(value).__name__}>"
    except Exception:  # a user's __repr__ that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."
