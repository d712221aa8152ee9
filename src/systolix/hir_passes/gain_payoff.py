"""Gains that pay: whether a layer's estimated gain buys enough accuracy for its SIMD multiply.

A gain ``2^k`` (``amplify_weights``) shrinks the error a layer's own rounding adds, its products'
and its weights', by ``2^-2k`` in variance, for one more rounding (the undo) and one SIMD multiply
per output vector (2 accumulator clocks, and runs are bound by the accumulators). What it cannot
shrink is the error the layer inherits from its inputs, carried through its weights. A standalone
per-channel layer (a batch norm and ReLU that no conv absorbs) has one product per output: its
inherited error times weights of up to 15 dwarfs the few LSB^2 its gain saves. So each layer's
output error is estimated both ways, in variance (README "Accuracy"; ``VR = 2^-2bp / 12``, one
rounding)::

    own(k)     = VR (1 + K + sum_k x_k^2) 2^-2k  +  VR [k > 0]      (bias, products, weights; undo)
    inherited  = sum_k w_k^2 var(x_k)

and the gain is kept only where ``own(0) - own(k)`` is at least ``PAYOFF`` of
``inherited + own(0)``: the share of the layer's output error it removes, which is also its share
of whatever error that output passes on. ``var(x)`` is carried through the network in layer order
by the same rules (the program's inputs one rounding; element-wise operations by their slope
squared plus one rounding; a residual add the sum of its operands'), with each layer's decision
taken before its consumers'; ``E[x^2]`` is the estimate's own synthetic runs'
(``LayerRange.input_mean_square``). Variances are in the real scale (per-tensor exponents,
``HirProgram.exponents``, taken out), a scalar per tensor (the mean over its channels).

Only plain compiles' estimated gains are weighed (a calibrated compile keeps every gain: its
accuracy target is the tighter one), and only non-negative gains on layers without their own
scaling (an average pool's gain keeps its sums in range, not just precise).
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer
from systolix.ir.postops import (PART_NODE, AddBroadcast, AddConstant, AddTensor, Clip, MulBroadcast, MulTensor, Relu, Scale,
                                 ScalePixels, Slope)
from systolix.numerics import DataType

# A gain is kept where it removes at least this share of its layer's output error variance (tuned
# on ResNet-20 v2, the MobileNetV2 stack and the MLP; see the README's "Where error enters").
PAYOFF = 0.1


class ErrorVariances:
    """The estimated error variance of each tensor's channels (per root tensor, real scale),
    carried through the layers in order; ``own`` and ``inherited`` give a conv layer's two parts."""

    def __init__(self, hir: HirProgram, dtype: DataType):
        self.hir = hir
        self.vr = 2.0 ** (-2 * dtype.binary_point) / 12
        self.tensors: dict[int, np.ndarray] = {}
        for act in hir.inputs.values():
            self._put(act, np.full(act.C, self._rounding(act)))

    def exponent(self, act) -> int:
        return self.hir.exponents.get(act.root()[0].name, 0)

    def sum_exponent(self, layer: ConvLayer) -> int:
        """The exponent ``layer``'s sums are computed at (``summed_tensor``'s)."""
        return self.exponent(summed_tensor(layer))

    def _rounding(self, act) -> float:
        """One rounding of ``act``'s stored values, in its real scale."""
        return self.vr * 2.0 ** (-2 * self.exponent(act))

    def of(self, act) -> np.ndarray:
        """Per channel of ``act``; a tensor the walk did not reach (written by a layer kind it
        does not follow): one rounding."""
        root, g0 = act.root()
        data = self.tensors.get(id(root))
        if data is None:
            return np.full(act.C, self._rounding(act))
        c0 = g0 * act.N
        return data[c0:c0 + act.C]

    def _put(self, act, value) -> None:
        root, g0 = act.root()
        data = self.tensors.setdefault(id(root), np.zeros(root.G * root.N))
        c0 = g0 * act.N
        data[c0:c0 + act.C] = value

    def inherited(self, layer: ConvLayer) -> np.ndarray:
        """Per output channel, the variance its inputs' errors carry through the weights (real scale
        of the output)."""
        e_out = self.sum_exponent(layer)  # the stored weights' scale
        total = np.zeros(layer.output.C)
        for inp in layer.inputs:
            w = inp.coefficients.astype(np.float64)
            real = 2.0 ** (self.exponent(inp.act) - e_out)  # the stored weights at the real scale
            var = self.of(inp.act)
            if inp.weights is not None:
                total += np.einsum("oi,i->o", np.sum(w * w, axis=(2, 3)), var) * real * real
            else:
                total += np.sum(w * w, axis=(1, 2)) * var * real * real
        return total

    def own(self, layer: ConvLayer, mean_squares: list[np.ndarray], gains) -> np.ndarray:
        """Per output channel, the variance the layer's own rounding adds at gains ``2^gains``
        (bias, products, weights times their inputs, the undo), real scale of the output."""
        e_out = self.sum_exponent(layer)  # where the sums are, and the undo rounds
        terms = np.ones(layer.output.C)  # the bias
        taps = layer.kernel[0] * layer.kernel[1]
        for inp, ms in zip(layer.inputs, mean_squares):
            stored = np.asarray(ms, np.float64) * 2.0 ** (2 * self.exponent(inp.act))
            if inp.weights is not None:
                terms += taps * inp.act.C + taps * float(np.sum(stored))
            else:
                terms += taps + taps * stored
        gains = np.broadcast_to(np.asarray(gains, np.float64), terms.shape)
        return self.vr * (terms * 2.0 ** (-2 * gains) + (gains != 0)) * 2.0 ** (-2 * e_out)

    def conv(self, layer: ConvLayer, sums: np.ndarray, slope: np.ndarray | None) -> None:
        """The layer's output error from its sums' (``inherited + own``): through its scaling
        (an average pool's multiplies), then its post-ops' mean squared ``slope`` (measured by
        ``estimate_ranges``; 1 when unknown), plus the operands' errors and each multiply's
        rounding."""
        var = np.asarray(sums, np.float64).copy()
        rounding = self._rounding(layer.output)
        for op in layer.post_ops[:layer.scaling_ops]:
            if isinstance(op, Scale):
                var = var * np.square(np.asarray(op.values, np.float64)) + rounding
        # The other parts of a reduction split in parts (``split_long_reductions``) are part of
        # the sum: through the post-ops' slope with it.
        post = layer.post_ops[layer.scaling_ops:]
        parts = {id(op) for op in post if isinstance(op, AddTensor) and op.node == PART_NODE}
        for op in post:
            if id(op) in parts:
                var = var + self.of(op.operand)
        var = var * (1.0 if slope is None else slope)
        for op in post:
            if isinstance(op, (Relu, Clip, AddConstant)) or id(op) in parts:
                continue  # exact; a part's error counted above
            if isinstance(op, (AddTensor, AddBroadcast, MulTensor, MulBroadcast)):
                operand = self.of(op.operand)
                var = var + (operand if operand.shape == var.shape else float(np.mean(operand)))
            if not isinstance(op, (AddTensor, AddBroadcast)):
                var = var + rounding  # a multiply rounds; a SIMD approximation errs about as much
        self._put(layer.output, var)
        for op in layer.post_ops:
            if op.written is not None:  # a copy of the tile: (about) the output's error
                self._put(op.written, var)

    def other(self, layer) -> None:
        """A layer that is not a conv: data movement passes its input's error on; a pixel mix
        scales it by its largest sum of squared coefficients and rounds; anything else rounds."""
        if isinstance(layer, (MaxPoolLayer, RemapLayer, ShuffleLayer)):
            var = self.of(layer.input)
            if isinstance(layer, ShuffleLayer) or var.shape[0] != layer.output.C:
                var = np.full(layer.output.C, float(np.mean(var)) if var.size else 0.0)
            self._put(layer.output, var)
        elif isinstance(layer, PixelMixLayer):
            squares = np.zeros(layer.output.P)
            np.add.at(squares, layer.out_pixel, np.square(layer.coefficient.astype(np.float64)))
            self._put(layer.output, self.of(layer.input) * float(np.max(squares, initial=0.0))
                      + self._rounding(layer.output))
        else:
            reads = [float(np.max(self.of(act), initial=0.0)) for act in layer.reads()]
            self._put(layer.output, np.full(layer.output.C, max(reads, default=0.0) + self._rounding(layer.output)))


def part_adds(layer: ConvLayer, maps: bool = False) -> list[AddTensor]:
    """The accumulator adds that sum a reduction's other parts into ``layer`` (its last part) at
    an exponent of their own: one-pixel layers, and with ``maps`` (a calibrated compile's,
    ``tensor_exponents.maps_apart``) maps too. Otherwise a map's parts are summed at its output's
    exponent: the multiply between the two costs a SIMD operation per output vector."""
    if layer.output.P != 1 and not maps:
        return []
    return [op for op in layer.post_ops if isinstance(op, AddTensor) and op.node == PART_NODE]


def summed_tensor(layer: ConvLayer, maps: bool = False):
    """The tensor whose exponent ``layer``'s sums are computed at (``tensor_exponents``): its
    parts' (the last part of a split reduction whose parts ``part_adds`` sums apart), else its output."""
    parts = part_adds(layer, maps)
    return parts[0].operand if parts else layer.output


def pays(inherited: np.ndarray, own_plain: np.ndarray, own_gained: np.ndarray) -> bool:
    """Whether the gain removes at least ``PAYOFF`` of the layer's output error variance."""
    before = float(np.sum(inherited + own_plain))
    return before > 0 and float(np.sum(own_plain - own_gained)) >= PAYOFF * before
