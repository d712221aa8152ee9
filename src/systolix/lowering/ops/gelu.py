"""GeLU, ``x Phi(x) = x (1 + erf(x / sqrt 2)) / 2``, as one SIMD post-op sequence on the layer
computing ``x``: the ONNX ``Gelu`` op (opset 20; ``approximate`` 'none' or 'tanh', which differ by
under 1e-3, a quarter of an LSB) and torch's erf export, ``Div(x, sqrt 2)`` (or ``Mul`` by
``1/sqrt 2``), Erf, Add 1, a Mul by ``x`` and one by 0.5 in either order (``erf_gelu``: the
last Mul lowers to the post-op on ``x``, the nodes inside to nothing; an Erf elsewhere is
the host's), and its tanh form, ``Tanh(sqrt(2/pi) (x + 0.044715 x^3))`` (``Pow(x, 3)`` or
``x x x``) in place of the Erf.

SiLU's structure (``silu.py``) with ``Phi(x) = (2 + g) / 4``, ``g`` the clamp of lines
approximating ``2 erf(x / sqrt 2)``. That rises faster than ``x`` (slope 1.596 at zero), so the
lines read ``y = (409/256) u`` (one rounding; ``2 erf`` is fitted on ``y``'s grid, where its slope
is under one and ``y`` is the steepest line), ``u = min(x, 8)`` (above 8 GeLU is ``x`` to 1e-14).
``u (2 + g) / 4 + (x - u)``; the lines' slopes are at least 1/256 so that they reach 2 and
``u (2 + g)`` is zero far below zero. Largest error over every FP16BP8 input 1.28 LSB, at
``x = 2.53`` (``tests/unit/test_gelu.py``); 46 SIMD instructions a vector, in four tiles
(``x - u``, ``u``, ``y``, the lines' minimum). ``evaluate`` is the exact function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import math

import numpy as np

from systolix.isa import SimdOp
from systolix.lowering.ops.lines import ClampedLines
from systolix.lowering.ops.silu import emit_gated_tail
from systolix.lowering.registry import OpHandler, handles

# The error function on arrays (scipy is not a dependency).
erf = np.vectorize(math.erf, otypes=[np.float64])

MAX_ERROR_LSB = 1.3
"""The largest error over every FP16BP8 input, in LSB (README's table)."""


@dataclass(eq=False)
class GeluOp(ClampedLines):
    """``x Phi(x)``."""

    kind: ClassVar[str] = "gelu"
    tile_copies: ClassVar[int] = 4
    # scripts/activation_lines.py gelu --tol 1.5 (on y = 409/256 x; V's LSB: a quarter of Phi's).
    LINES: ClassVar = ((234, 9), (202, 38), (166, 84), (127, 150), (91, 225), (58, 308), (31, 389), (10, 465), (1, 506))
    TOP: ClassVar[int] = 512

    def evaluate(self, acc, read):
        return 0.5 * acc * (1.0 + erf(acc / np.sqrt(2.0)))

    def tail_constants(self):
        return [0.25, 2.0, 8.0, 409 / 256]

    def emit_head(self, t, slot, v) -> int:
        u = t.acc_scratch + t.n_vec + (v - t.acc)
        y = u + t.n_vec
        eight = t.acc_const + slot + 3 + 2 * len(self.LINES)
        t.e.simd(SimdOp.MOVE, 0, 0, 1, read=eight)
        t.e.simd(SimdOp.MIN, 0, 1, 1, read=v, write=u)  # r = u = min(x, 8), kept
        t.e.simd(SimdOp.SUBTRACT, 0, 1, 0, read=v, write=v)  # x - u
        t.e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=eight + 1, write=y)  # y = 409/256 u
        return y

    def emit_tail(self, t, slot, v, s, x) -> None:
        # the lines read y (= x here), u sits one tile before it
        emit_gated_tail(t, t.acc_const + slot + 1 + 2 * len(self.LINES), v, s, u=x - t.n_vec)

    def text(self) -> str:
        return f"gelu ({len(self.LINES) + 1} lines)"


@handles("Gelu")
class Gelu(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        from systolix.lowering.ops.tandem_functions import gelu_op  # noqa: PLC0415

        lw.post_op_layer(node, lw.act_of(node, 0), gelu_op(node, lw, node.attr("approximate", "none") in ("tanh", b"tanh")))


def _scalar(lw, name):
    c = lw.g.const(name)
    if c is None or np.size(c) != 1:
        return None
    return float(np.asarray(c).reshape(-1)[0])


def _split(node, lw):
    """A binary node's ``(tensor operand, scalar constant)``, or None."""
    if len(node.inputs) != 2:
        return None
    for i in (0, 1):
        c = _scalar(lw, node.inputs[1 - i])
        if c is not None and lw.g.const(node.inputs[i]) is None:
            if node.op_type in ("Div", "Sub") and i == 1:
                return None
            return node.inputs[i], c
    return None


def _close(a, b) -> bool:
    return abs(a - b) < 1e-3 * abs(b)


def _cube_of(name, lw):
    """``x`` when ``name`` is ``Pow(x, 3)``, ``Mul(Mul(x, x), x)`` or ``Mul(x, Mul(x, x))``; and its nodes."""
    producers = lw.g.producers()
    n = producers.get(name)
    if n is None:
        return None
    if n.op_type == "Pow" and len(n.inputs) == 2 and _scalar(lw, n.inputs[1]) == 3.0 and lw.g.const(n.inputs[0]) is None:
        return n.inputs[0], [n]
    if n.op_type != "Mul" or len(n.inputs) != 2:
        return None
    for i in (0, 1):
        sq = producers.get(n.inputs[1 - i])
        if sq is not None and sq.op_type == "Mul" and list(sq.inputs) == [n.inputs[i]] * 2:
            return n.inputs[i], [sq, n]
    return None


def _tanh_inner(name, lw):
    """``x`` when ``name`` is ``sqrt(2/pi) (x + 0.044715 x^3)``; and its nodes, the Add reading ``x`` first."""
    producers = lw.g.producers()
    m = producers.get(name)
    if m is None or m.op_type != "Mul" or (s := _split(m, lw)) is None or not _close(s[1], np.sqrt(2 / np.pi)):
        return None
    add = producers.get(s[0])
    if add is None or add.op_type != "Add" or len(add.inputs) != 2:
        return None
    for i in (0, 1):
        k = producers.get(add.inputs[1 - i])
        if k is None or k.op_type != "Mul" or (ks := _split(k, lw)) is None or not _close(ks[1], 0.044715):
            continue
        cube = _cube_of(ks[0], lw)
        if cube is not None and cube[0] == add.inputs[i]:
            return add.inputs[i], [add, *cube[1], k, m]
    return None


def _phi_of(name, lw):
    """``x`` when ``name`` is ``1 + erf(x / sqrt 2)`` or ``1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))``
    as torch exports them, else None; and its nodes, the first reading ``x``."""
    producers = lw.g.producers()
    add = producers.get(name)
    if add is None or add.op_type != "Add" or (s := _split(add, lw)) is None or not _close(s[1], 1.0):
        return None
    f = producers.get(s[0])
    if f is not None and f.op_type == "Tanh":
        inner = _tanh_inner(f.inputs[0], lw)
        return None if inner is None else (inner[0], [*inner[1], f, add])
    if f is None or f.op_type != "Erf":
        return None
    scale = producers.get(f.inputs[0])
    if scale is None or scale.op_type not in ("Div", "Mul") or (t := _split(scale, lw)) is None:
        return None
    if not _close(t[1], np.sqrt(2.0) if scale.op_type == "Div" else np.sqrt(0.5)):
        return None
    return t[0], [scale, f, add]


def erf_gelu(node, lw):
    """For the last node of torch's erf GeLU, ``0.5 * (x * (1 + erf(x / sqrt 2)))`` with the
    halving anywhere in the product (operands in either order): ``(x, interior nodes)``, else None."""
    if node.op_type != "Mul" or len(node.inputs) != 2 or not any(n.op_type in ("Erf", "Tanh") for n in lw.g.nodes):
        return None
    producers = lw.g.producers()
    s = _split(node, lw)
    if s is not None:  # Mul(Mul(x, phi2), 0.5)
        if not _close(s[1], 0.5) or (m := producers.get(s[0])) is None or m.op_type != "Mul" or _split(m, lw) is not None:
            return None
        for i in (0, 1):
            found = _phi_of(m.inputs[1 - i], lw)
            if found is not None and found[0] == m.inputs[i]:
                return found[0], found[1] + [m]
        return None
    for i in (0, 1):  # Mul(Mul(x, 0.5), phi2)
        h = producers.get(node.inputs[i])
        found = _phi_of(node.inputs[1 - i], lw)
        if found is not None and h is not None and h.op_type == "Mul" and (hs := _split(h, lw)) is not None \
                and _close(hs[1], 0.5) and hs[0] == found[0]:
            return found[0], found[1] + [h]
    return None


def inside_erf_gelu(node, lw) -> bool:
    """The node is an interior node of an erf GeLU whose every output stays inside it."""
    if node.op_type not in ("Div", "Mul", "Erf", "Add", "Tanh", "Pow") or not any(n.op_type in ("Erf", "Tanh") for n in lw.g.nodes):
        return False
    consumers = lw.g.consumers()
    frontier, seen = [node], 0
    while frontier and seen < 8:
        nxt = []
        for n in frontier:
            for r in consumers.get(n.outputs[0], []):
                found = erf_gelu(r, lw)
                if found is not None and any(m is node for m in found[1]):
                    inner = {id(m) for m in found[1]} | {id(r)}
                    return all(out not in lw.g.outputs and all(id(c) in inner for c in consumers.get(out, []))
                               for m in found[1] for out in m.outputs)
                nxt.append(r)
        frontier, seen = nxt, seen + 1
    return False


@handles("Erf", "Pow")
class InsideGelu(OpHandler):
    def check(self, node, lw):
        from systolix.lowering.ops.tandem_functions import pow_reason  # noqa: PLC0415

        if inside_erf_gelu(node, lw):
            return None
        return pow_reason(node, lw) if node.op_type == "Pow" else f"{node.op_type} outside a GeLU"

    def lower(self, node, lw):
        from systolix.lowering.ops.tandem_functions import lower_pow  # noqa: PLC0415

        if node.op_type == "Pow" and not inside_erf_gelu(node, lw):
            lower_pow(node, lw)
