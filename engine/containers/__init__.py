"""Containers: elements that run other elements (ForEach, Parallel, Loop, Branch, Graph)."""

from .branch import Branch
from .foreach import ForEach
from .graph import Graph
from .loop import Loop
from .parallel import Parallel

__all__ = ["Branch", "ForEach", "Graph", "Loop", "Parallel"]
