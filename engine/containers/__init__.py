"""Containers: elements that run other elements (ForEach, Loop, Branch, Graph)."""

from .branch import Branch
from .foreach import ForEach
from .graph import Graph
from .loop import Loop

__all__ = ["Branch", "ForEach", "Graph", "Loop"]
