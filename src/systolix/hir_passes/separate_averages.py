"""Separate averages: a global average of more than ``SEPARATE_TAPS`` values averages along W,
then along H: two layers, ``NAME/rows`` then ``NAME``.

The accumulators hold a 16-bit sum, so an average pool scales each value down before summing
(weights ``2^-s``, and a negative gain where its range asks for one): every bit scaled away is
rounded off each product. A sum of 7 values needs 7x less scaling than a sum of 49, so two
passes keep more bits; the one extra rounding, of the row averages, weighs about a seventh of a
step at the output. ResNet-50 v2's 7x7 pool, whose range is its input's (``estimate_ranges``):
weights of 1/16 in one sum, 1/2 in two; with the weight and multiply paired (``pool_scales``),
ResNet-50 v2's logits about 1.5 -> 1.0 LSB RMS on 4 and 8 random normal inputs (a throwaway
script comparing each tensor with onnxruntime's; 1.00 on ``benchmarks/bench_accuracy.py``'s 16
with all of it; the format's limit 0.35).

Calibrated compiles too, each pass sized as the global average was (``amplify_weights``'
global-pool rule, fixed headrooms times 4 up to a bound): a row's mean follows the image's
brightness as the global mean does, so the rows take no extreme-value tail
(``measure_ranges.average_of_rows``), their negative gains the same headroom, and the second
pass the whole average's bound, the map's largest value (bounded by the samples' largest row
mean instead, it took 2 to 3 of ``tests/e2e/test_compile_networks.py``'s 1,000 image-like inputs
of ResNet-20 v2 past its range, against 1 unseparated; sized at 1.5x the samples' largest, the
rows of ResNet-50 v2 took 1 of its 100). The MobileNetV2 stack's 12x12 pool, calibrated on 64
random normal samples (seeds 1,000,000, 7 and 99), went from x1.43, x1.27 and x1.46 the format
limit's error to x1.31, x1.22 and x1.25 (``benchmarks/bench_accuracy.py``'s 64 inputs; with the
rows on the tail law x1.35, x1.22 and x1.21: the same on average). Runs before the range passes, which see the two layers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import Scale
from systolix.lowering.ops.average import rows_then_columns

SEPARATE_TAPS = 16


def is_global_average(layer) -> bool:
    """An average pool (per-channel taps of one weight, a uniform scaling) over the whole map
    of its input, into one pixel a channel."""
    if not (isinstance(layer, ConvLayer) and layer.scaling_ops and len(layer.inputs) == 1
            and layer.inputs[0].diagonal is not None and isinstance(layer.post_ops[0], Scale)):
        return False
    x, out = layer.inputs[0].act, layer.output
    return (out.H == out.W == 1 and layer.kernel == (x.H, x.W) and layer.pads == (0, 0, 0, 0)
            and layer.dilation == (1, 1) and not any(layer.bias))


def _scale(layer: ConvLayer) -> float:
    """What the layer multiplies each value of its window by: its weight times its scaling."""
    scale = float(layer.inputs[0].diagonal.flat[0])
    for p in layer.post_ops[:layer.scaling_ops]:
        scale *= float(np.asarray(p.values).flat[0])
    return scale


def separated(layer: ConvLayer) -> list[ConvLayer] | None:
    """``layer`` (a global average or sum, ``is_global_average``) as rows, then columns, the
    second with the layer's post-ops after its scaling; None if it is neither."""
    x, out = layer.inputs[0].act, layer.output
    taps = x.H * x.W
    uniform = all(np.all(np.asarray(p.values) == np.asarray(p.values).flat[0]) for p in layer.post_ops[:layer.scaling_ops])
    if not uniform or not np.all(layer.inputs[0].diagonal == layer.inputs[0].diagonal.flat[0]):
        return None
    if np.isclose(_scale(layer) * taps, 1.0, rtol=1e-6):
        total = False
    elif np.isclose(_scale(layer), 1.0, rtol=1e-6):
        total = True
    else:
        return None
    node = layer.nodes[0] if layer.nodes else layer.name
    op = layer.ops[0] if layer.ops else "GlobalAveragePool"
    first, second = rows_then_columns(layer.name, x, out, (x.H, x.W), (1, 1), (1, 1), (0, 0, 0, 0), True, op, node, total)
    keep = {"ops": layer.ops, "nodes": layer.nodes}
    return [dataclasses.replace(first, **keep),
            dataclasses.replace(second, post_ops=second.post_ops + layer.post_ops[layer.scaling_ops:], **keep)]


def separate_averages(hir: HirProgram, ctx) -> HirProgram:
    """The pass, on a fixed-point type in compiles with gains: calibrated, or estimated."""
    if not (ctx.samples or ctx.estimate_gains) or not ctx.arch.data_type.is_fixed:
        return hir
    layers = []
    for layer in hir.layers:
        if is_global_average(layer) and layer.kernel[0] > 1 and layer.kernel[1] > 1 \
                and layer.kernel[0] * layer.kernel[1] > SEPARATE_TAPS:
            parts = separated(layer)
            layers.extend(parts or [layer])
        else:
            layers.append(layer)
    if len(layers) == len(hir.layers):
        return hir
    return dataclasses.replace(hir, layers=layers)
