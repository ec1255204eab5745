"""lazy_module: a module imported when one of its attributes is first read."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule:
    """Stands for module `name` until used. Each attribute is read from the real module (so a
    test that patches it is seen). `importlib.util.LazyLoader` would do this with no proxy, but
    before Python 3.12 it is not safe when two threads touch the module first at once
    (gh-114763), and a Runtime is shared between threads."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            # import_module, not sys.modules: a module that another thread is still importing
            # is already in sys.modules, half built; import_module waits until it is done.
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """Module `name` (absolute), imported at the first attribute read instead of now: for the
    Runtime's rarely used families (control, inspection, timers...), which would otherwise
    load with `import tarry` in every process, including one that only resumes a token."""
    return _LazyModule(name)
