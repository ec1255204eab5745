"""Containers: elements that run other elements (ForEach, Parallel, Loop, Branch, Graph)."""

from tarry.engine.containers.branch import Branch
from tarry.engine.containers.foreach import ForEach
from tarry.engine.containers.graph import Graph
from tarry.engine.containers.loop import Loop
from tarry.engine.containers.parallel import Parallel

__all__ = ["Branch", "ForEach", "Graph", "Loop", "Parallel"]
