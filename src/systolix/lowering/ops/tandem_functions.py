"""Element-wise ops on the Tandem vector unit, as post-ops of the layer computing their input
(``systolix.codegen.tandem_elementwise``): Sigmoid, Tanh and GeLU (both forms) more accurately
than the stock TCU's SIMD line fits (which they replace only on architectures with the unit),
Sqrt, and Div of two computed tensors; ``Pow(x, 2)`` is a SIMD multiply of the value by itself
on every architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import math

import numpy as np

from systolix.codegen.tandem_elementwise import (
    channel_max_program, divide_program, elementwise_program, interim_vectors, reciprocal_program)
from systolix.ir.lir import raw_of
from systolix.ir.postops import PostOp
from systolix.isa import SimdOp
from systolix.lowering.registry import NO_IMPLEMENTATION, OpHandler, handles

_erf = np.vectorize(math.erf, otypes=[np.float64])

EXACT = {
    "sigmoid": lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)),  # 1 / (1 + exp(-x)), without its overflow
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))),
    "sqrt": lambda x: np.sqrt(np.maximum(x, 0.0)),
}


@dataclass(eq=False)
class TandemFunction(PostOp):
    """``function(x)`` element by element on the Tandem unit (one of ``EXACT``'s names)."""

    function: str = "sigmoid"
    kind: ClassVar[str] = "tandem_function"

    def evaluate(self, acc, read):
        return EXACT[self.function](acc)

    def emit(self, t, slot) -> None:
        dt = t.e.arch.data_type
        t.e.out.extend(elementwise_program(self.function, raw_of(t.acc), t.n_vec, dt.width, dt.binary_point))

    def text(self) -> str:
        return f"{self.function} (Tandem unit)"


def _load_beside(t, operand) -> None:
    """The operand's part of the tile into the second tile (``acc_scratch``), as ``MulTensor`` does."""
    e, memory = t.e, t.memory
    base, gs, hs, ws = memory.strides(operand)
    n = t.per_group
    on_chip = memory.on_chip(operand)
    for go in t.groups():
        if on_chip:
            e.move(base + go * gs + t.oh0 * hs, t.acc_scratch + (go - t.go0) * n, n)
            continue
        sbase = t.stage + (go - t.go0) * n
        for r in range(t.rows):
            e.move(base + go * gs + (t.oh0 + r) * hs, sbase + r * t.OW, t.OW, ws, 1)
    if not on_chip:
        e.move(t.stage, t.acc_scratch, t.n_vec)


@dataclass(eq=False)
class DivTensor(PostOp):
    """``/ tensor`` of the same shape: the operand beside the tile, one Tandem ``Div`` a vector."""

    operand: Any = None
    kind: ClassVar[str] = "div_tensor"
    tile_copies: ClassVar[int] = 2

    @property
    def tensor(self):
        return self.operand

    def evaluate(self, acc, read):
        b = read(self.operand)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b == 0, np.sign(acc) * 1e9, acc / np.where(b == 0, 1.0, b))

    def emit(self, t, slot) -> None:
        _load_beside(t, self.operand)
        t.e.out.extend(divide_program(raw_of(t.acc), raw_of(t.acc_scratch), t.n_vec))

    def text(self) -> str:
        return f"divide by {self.operand.name} (Tandem unit)"


@dataclass(eq=False)
class DivideConstant(PostOp):
    """``constant / x``, one value per channel: the constants as SIMD vectors beside the tile,
    one Tandem ``Div`` a vector (``Reciprocal`` is ``1 / x``)."""

    numerators: np.ndarray = None
    kind: ClassVar[str] = "divide_constant"

    def evaluate(self, acc, read):
        c = np.asarray(self.numerators, np.float64)[:, None, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(acc == 0, np.sign(c) * 1e9, c / np.where(acc == 0, 1.0, acc))

    def constants(self, c):
        # One vector a group, padding lanes 0: 0 / 0 is 0 there (a shared vector would saturate them).
        return c.simd(list(c.channel_vectors(np.asarray(self.numerators, np.float32))))

    def emit(self, t, slot) -> None:
        t.e.out.extend(reciprocal_program(raw_of(t.acc), raw_of(t.acc_const) + slot + t.go0, t.go1 - t.go0, t.per_group, 1))

    def text(self) -> str:
        return "divide a constant (Tandem unit)"


@dataclass(eq=False)
class ChannelMax(PostOp):
    """The max over each pixel's channels into its channel 0 (the rest of the tile unchanged)."""

    channels: int = 0
    kind: ClassVar[str] = "channel_max"
    all_groups: ClassVar[bool] = True

    def evaluate(self, acc, read):
        out = acc.copy()
        out[0] = acc[: self.channels].max(axis=0)
        return out

    def constants(self, c):
        if self.channels % c.N == 0:
            return None
        lanes = np.arange(c.N) < self.channels % c.N  # padding never the max (as Softmax's mask)
        return c.simd([c.q(np.where(lanes, 1.0, 0.0)), c.q(np.where(lanes, 0.0, -128.0))])

    def emit(self, t, slot) -> None:
        if t.go0 != 0 or t.go1 * t.N < self.channels:
            raise AssertionError(f"a max over channels on the Tandem unit needs every channel group in the tile: {t}")
        mask = None if slot is None else raw_of(t.acc_const) + slot
        t.e.out.extend(channel_max_program(raw_of(t.acc), t.go1, t.per_group, mask))

    def text(self) -> str:
        return f"max over {self.channels} channels (Tandem unit)"


@dataclass(eq=False)
class Square(PostOp):
    """``x * x``: one SIMD multiply a vector (rounded once)."""

    kind: ClassVar[str] = "square"

    def evaluate(self, acc, read):
        return acc * acc

    def emit(self, t, slot) -> None:
        for v in range(t.n_vec):
            t.e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc + v)
            t.e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=t.acc + v, write=t.acc + v)

    def text(self) -> str:
        return "square"


def function_reason(node, lw, function: str, index: int = 0) -> str | None:
    """Why ``function`` of input ``index`` cannot run on the unit, or None."""
    if lw.tandem is None:
        return NO_IMPLEMENTATION
    dt = lw.data_type
    need = interim_vectors(function, dt.width, dt.binary_point)
    if need > lw.tandem.interim_depth:
        return f"{function} on the Tandem unit needs {need} vectors of its interim buffer; it has {lw.tandem.interim_depth}"
    return lw.activation_reason(node, index)


@handles("Sqrt")
class Sqrt(OpHandler):
    def check(self, node, lw):
        return function_reason(node, lw, "sqrt")

    def lower(self, node, lw):
        lw.post_op_layer(node, lw.act_of(node, 0), TandemFunction(node=node.name, function="sqrt"))


def pow_exponent(node, lw) -> float | None:
    e = lw.g.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if e is None or np.size(e) != 1:
        return None
    return float(np.asarray(e).reshape(-1)[0])


def pow_reason(node, lw) -> str | None:
    """``Pow(x, 2)`` (SIMD) and ``Pow(x, 0.5)`` (the unit's Sqrt); others stay on the host."""
    p = pow_exponent(node, lw)
    if p == 2.0:
        return lw.activation_reason(node, 0)
    if p == 0.5:
        return function_reason(node, lw, "sqrt")
    return f"Pow with exponent {p if p is not None else 'a computed tensor'}: the accelerator has x^2, x^0.5 (Tandem unit) and GeLU's x^3"


def lower_pow(node, lw) -> None:
    p = pow_exponent(node, lw)
    x = lw.act_of(node, 0)
    if p == 2.0:
        lw.post_op_layer(node, x, Square(node=node.name))
    else:
        lw.post_op_layer(node, x, TandemFunction(node=node.name, function="sqrt"))


def gelu_op(node, lw, tanh_form: bool) -> PostOp:
    """GeLU's post-op: the unit's when the architecture has it, else the stock SIMD lines."""
    from systolix.lowering.ops.gelu import GeluOp  # noqa: PLC0415 (gelu imports this module)

    if lw.tandem is None:
        return GeluOp(node=node.name)
    return TandemFunction(node=node.name, function="gelu_tanh" if tanh_form else "gelu")


@handles("Reciprocal")
class Reciprocal(OpHandler):
    def check(self, node, lw):
        return NO_IMPLEMENTATION if lw.tandem is None else lw.activation_reason(node, 0)

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        lw.post_op_layer(node, x, DivideConstant(node=node.name, numerators=np.ones(x.C, np.float32)))
