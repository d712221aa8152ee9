"""The op handlers: one object per ONNX op (or small family), in its own module of
``systolix.lowering.ops``, registered here by ``@handles(...)``.

A handler's ``check(node, lowering)`` says why the accelerator cannot run the node in the
lowering's current state (constant operands, attributes, shapes, layouts), or None; together the
handlers are the table of what the accelerator supports, which host placement reads. Its
``lower(node, lowering)`` makes the node's layers; it is called only for nodes ``check``
accepted, so it never refuses.
"""

from __future__ import annotations

from typing import ClassVar

from systolix.ir import Node

HANDLERS: dict[str, "OpHandler"] = {}
NO_IMPLEMENTATION = "the accelerator has no implementation of this op"


class OpHandler:
    """Lowers the ops named by ``@handles``; see the module docstring."""

    ops: ClassVar[tuple[str, ...]] = ()

    def check(self, node: Node, lw) -> str | None:
        return None

    def lower(self, node: Node, lw) -> None:
        raise NotImplementedError


def handles(*ops: str):
    """Class decorator: register one instance of the handler for ``ops``."""
    def register(cls: type[OpHandler]) -> type[OpHandler]:
        cls.ops = tuple(ops)
        handler = cls()
        for op in ops:
            if op in HANDLERS:
                raise RuntimeError(f"two handlers for op {op}: {type(HANDLERS[op]).__name__} and {cls.__name__}")
            HANDLERS[op] = handler
        return cls
    return register


def unsupported_reason(node: Node, lw) -> str | None:
    """Why ``node`` cannot run on the accelerator here, or None (the support table's verdict)."""
    if node.outputs and node.outputs[0] in getattr(lw, "claimed", ()):
        return None  # lowered with the node before it
    handler = HANDLERS.get(node.op_type)
    if handler is None:
        return NO_IMPLEMENTATION
    return handler.check(node, lw)


def supported_ops() -> list[str]:
    return sorted(HANDLERS)
