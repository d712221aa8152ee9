"""The compiler's graph IR: typed ops on named tensors with static shapes."""

from systolix.ir.graph import Graph, Node, Tensor

__all__ = ["Graph", "Node", "Tensor"]
