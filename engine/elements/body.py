"""Bodies: what a container runs, as a tuple of elements made from steps, containers and callables."""

from __future__ import annotations

from typing import Any

from tarry.engine.elements.element import Element
from tarry.engine.elements.step import Step
from tarry.engine.errors import InvalidFlow


def as_element(obj: Any) -> Element:
    """An element for `obj`: elements pass, plain callables become steps."""
    if isinstance(obj, Element):
        return obj
    if callable(obj):
        return Step(obj)
    msg = f"a body element must be a step, a container or a callable (got {obj!r})"
    raise InvalidFlow(msg)


def as_body(body: Any, owner: str) -> tuple[Element, ...]:
    """Normalize a body (an element, a callable, or a list of them) to a tuple of elements.

    Bare lambdas are named by their order among the body's lambdas: `<lambda>`, `<lambda>_2`...
    """
    items = list(body) if isinstance(body, list | tuple) else [body]
    elements: list[Element] = []
    lambdas = 0
    for item in items:
        if not isinstance(item, Element) and getattr(item, "__name__", None) == "<lambda>":
            lambdas += 1
            item = Step(item, "<lambda>" if lambdas == 1 else f"<lambda>_{lambdas}")
        elements.append(as_element(item))
    seen: set[str] = set()
    for el in elements:
        if el.name in seen:
            msg = f"names in the body of {owner!r} must be unique ({el.name!r} appears twice)"
            raise InvalidFlow(msg)
        seen.add(el.name)
    return tuple(elements)
