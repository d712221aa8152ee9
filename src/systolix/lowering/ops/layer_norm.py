"""LayerNormalization over the channel axis (the last axis of ``[1, T, D]`` / ``[M, D]`` token
tensors, or the channels of ``[1, C, 1, 1]``) on the Tandem vector unit, as a post-op of the
layer computing its input, like Softmax: the unit takes each token's channel groups from the
accumulators, computes mean, variance and ``1/sqrt`` in its wide type and hands the scaled and
shifted result back for the save (``systolix.codegen.tandem_layer_norm``). Without the unit, or
over other axes, the host runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from systolix.codegen.tandem_layer_norm import interim_vectors, layer_norm_program, split_constant
from systolix.ir.lir import raw_of
from systolix.ir.postops import PostOp
from systolix.lowering.ops.softmax import over_channels
from systolix.lowering.registry import NO_IMPLEMENTATION, OpHandler, handles

# Largest error of the unit's program against NumPy's LayerNorm of the same (accelerator) input, in
# LSB: 0.507 to 0.511 over T x D of 64x64, 32x64, 16x40 and 8x128 (benchmarks/bench_tandem_norm.py);
# the error model (tests/error_model.py) holds it to this.
MAX_ERROR_LSB = 0.52


@dataclass(eq=False)
class LayerNormOp(PostOp):
    """``(x - mean) / sqrt(var + eps) scale + bias`` over the channels of each pixel."""

    channels: int = 0
    epsilon: float = 1e-5
    scale: np.ndarray = field(default_factory=lambda: np.ones(1, np.float32))
    bias: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    kind: ClassVar[str] = "layer_norm"
    all_groups: ClassVar[bool] = True

    def evaluate(self, acc, read):
        mean = acc.mean(axis=0, keepdims=True)
        var = ((acc - mean) ** 2).mean(axis=0, keepdims=True)
        scale = np.asarray(self.scale, np.float64)[:, None, None]
        bias = np.asarray(self.bias, np.float64)[:, None, None]
        return (acc - mean) / np.sqrt(var + self.epsilon) * scale + bias

    def constants(self, c):
        bp = int(round(np.log2(float(c.q(np.ones(1))[0]))))  # the data type's fractional bits
        parts = [*split_constant(self.scale, bp), *split_constant(self.bias, bp)]
        vectors = [v for part in parts for v in c.channel_vectors(part)]
        if self.channels % c.N:
            vectors.append(c.q(np.where(np.arange(c.N) < self.channels % c.N, 1.0, 0.0)))
        return c.simd(vectors)

    def emit(self, t, slot) -> None:
        if t.go0 != 0 or t.go1 * t.N < self.channels:
            raise AssertionError(f"LayerNormalization on the Tandem unit needs every channel group in the tile: {t}")
        dt = t.e.arch.data_type
        t.e.out.extend(layer_norm_program(raw_of(t.acc), t.go1, self.channels, t.N, dt.width, dt.binary_point,
                                          raw_of(t.acc_const) + slot, self.channels % t.N != 0, self.epsilon, t.per_group))

    def text(self) -> str:
        return f"layer norm over {self.channels} channels (Tandem unit)"


@handles("LayerNormalization")
class LayerNormalization(OpHandler):
    def check(self, node, lw):
        if lw.tandem is None:
            return NO_IMPLEMENTATION
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        if any(node.outputs[1:]):
            return "its Mean and InvStdDev outputs are used (the Tandem unit gives the normalised tensor only)"
        reason = lw.const_reason(node, 1, "scale") or (lw.optional_const_reason(node, 2, "bias") if len(node.inputs) > 2 else None)
        if reason:
            return reason
        shape = lw.ref(node, 0).shape
        axis = int(node.attr("axis", -1))
        if not -len(shape) <= axis < len(shape):
            return f"axis {axis} is outside the input's rank {len(shape)}"
        if not over_channels(shape, axis, 1):
            return (f"the Tandem unit normalises over the channel axis (the last of [M, D] and [1, T, D]); this one is "
                    f"{list(shape)} over axes {axis} and after")
        x = lw.input_activation(node, 0)
        if self._vectors(node, lw) is None:
            return "its scale and bias are not one value per channel"
        dt = lw.data_type
        if not dt.is_fixed or x.C > 1 << (2 * dt.binary_point):
            return f"a mean over {x.C} channels: the Tandem unit's wide type averages at most {1 << (2 * dt.binary_point)}"
        need = interim_vectors(x.G, dt.width, dt.binary_point)
        if need > lw.tandem.interim_depth:
            return f"{x.C} channels need {need} vectors of the Tandem unit's interim buffer; it has {lw.tandem.interim_depth}"
        return None

    @staticmethod
    def _vectors(node, lw):
        r = lw.ref(node, 0)
        scale = lw.channel_vector(lw.const(node, 1), r)
        bias = lw.channel_vector(lw.const(node, 2), r) if len(node.inputs) > 2 and node.inputs[2] else np.zeros_like(scale)
        if scale is None or bias is None:
            return None
        return scale, bias

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        scale, bias = self._vectors(node, lw)
        lw.post_op_layer(node, x, LayerNormOp(node=node.name, channels=x.C, epsilon=float(node.attr("epsilon", 1e-5)),
                                              scale=scale, bias=bias))
