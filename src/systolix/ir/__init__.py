"""The compiler's IRs, each a value with a text form (``.text()``) and structural equality
(``==``, ``systolix.ir.structure.same``):

* the graph IR (``graph``): ONNX ops on named tensors with static shapes;
* HIR (``hir``, ``postops``): layers on memory objects; ``evaluate`` gives its float meaning;
* the plan (``plan``): constants, memory map, and per layer its stages, partitions and buffers;
* LIR (``lir``): instructions on addresses tagged with their memory.

``layout`` says how an ONNX-shaped tensor sits in vector memory, which every stage agrees on.
"""

from systolix.ir.graph import Graph, Node, Tensor
from systolix.ir.structure import same

__all__ = ["Graph", "Node", "Tensor", "same"]
