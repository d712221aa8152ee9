"""ReduceMean, ReduceSum and ReduceMax over the axes the layout makes natural.

A tensor sits in memory as channels (across the lanes) by pixels (``canonical_chw``): the
channels of ``[1, C, H, W]`` and the last axis of ``[1, T, D]`` / ``[M, K]``; every other axis
is pixels. A reduction over pixel axes is a pooling window over them (the mean and sum: the
average pool's conv with weights ``2^-shift``, ``average.py``; the max: a max pool), so ViT's
mean over its tokens (``[1, T, D]``, axes ``[1]``) is a global average pool of a ``1 x T`` map.
A mean or sum over the channel axis is a 1x1 conv to one channel on the array (weights
``2^-shift``, then SIMD multiplies), a max the Tandem unit's (``Max`` over the groups, ``LaneMax``,
into channel 0, of which the output is a view); over channels and pixels together, the pixels
first, then the channels. A max over the channels without the unit stays on the host with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from systolix.ir.hir import Activation, ConvInput, ConvLayer, MaxPoolLayer
from systolix.ir.layout import canonical_chw, canonical_elements
from systolix.ir.postops import Scale
from systolix.lowering.ops.average import _size_reason, average, pool_shift
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.state import Ref

# Per rank: what each ONNX axis is in the layout (n: the batch, c: channels, h/w: pixel rows/columns).
ROLES = {1: "c", 2: "wc", 3: "nwc", 4: "nchw"}


def reduce_axes(node, lw) -> list[int] | str:
    """The node's axes (normalised, ascending), or the reason they cannot be read."""
    shape = lw.ref(node, 0).shape
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        reason = lw.const_reason(node, 1, "axes")
        if reason:
            return reason
        axes = lw.const(node, 1).reshape(-1).tolist()
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            return []
        axes = list(range(len(shape)))
    out = sorted({int(a) + len(shape) if int(a) < 0 else int(a) for a in axes})
    if any(not 0 <= a < len(shape) for a in out):
        return f"axes {list(axes)} outside the input's rank {len(shape)}"
    return out


def reduce_plan(node, lw, op: str) -> tuple[tuple[int, int], bool] | str:
    """``((kh, kw), over_channels)`` for the node, or the reason it stays on the host."""
    r = lw.ref(node, 0)
    axes = reduce_axes(node, lw)
    if isinstance(axes, str):
        return axes
    roles = ROLES.get(len(r.shape))
    if roles is None or canonical_chw(r.shape) is None:
        return f"a reduction of a rank-{len(r.shape)} tensor {list(r.shape)}"
    reduced = {roles[a] for a in axes if r.shape[a] != 1}
    x = lw.input_activation(node, 0)
    kernel = (x.H if "h" in reduced else 1, x.W if "w" in reduced else 1)
    channels = "c" in reduced
    if channels and op == "ReduceMax" and lw.tandem is None:
        return ("a max over the channel axis (across the lanes of a vector): the Tandem unit's LaneMax runs it; the stock "
                "TCU reduces only pixel axes")
    if kernel != (1, 1) and op != "ReduceMax" and lw.data_type.is_fixed:
        reason = _size_reason(lw, kernel)
        if reason:
            return reason
    return kernel, channels


def bind_reduced(node, lw, out) -> None:
    """Bind the node's output (keepdims or not) to ``out``, laid out as its kept-dims shape."""
    shape_in = lw.ref(node, 0).shape
    axes = reduce_axes(node, lw)
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape_in))
    elements = canonical_elements(kept)
    shape = lw.shape(node.outputs[0])
    elements = elements.reshape(shape)
    chw = canonical_chw(shape)
    canonical = chw is not None and chw[:3] == (out.C, out.H, out.W) and np.array_equal(elements, canonical_elements(shape))
    lw.refs[node.outputs[0]] = Ref(out, shape, elements, canonical)


def sum_over_channels(node, lw, x, name: str, mean: bool):
    """A 1x1 conv summing ``x``'s channels into one (weights ``2^-shift``), then multiplies to
    the sum or the mean."""
    shift = pool_shift(x.C)
    out = lw.new_act(name, 1, x.H, x.W)
    w = np.full((1, x.C, 1, 1), 2.0 ** -shift, np.float32)
    factor = 2.0 ** shift / (x.C if mean else 1)
    m = int(np.clip(-math.floor(math.log2(factor)), 0, 6))
    post = [Scale(np.full(1, factor * 2 ** m, np.float32), node=node.name)]
    if m:
        post.append(Scale(np.full(1, 2.0 ** -m, np.float32), node=node.name))
    lw.add(ConvLayer(name, [ConvInput(x, weights=w)], out, np.zeros(1, np.float32), (1, 1), post_ops=post, ops=[node.op_type],
                     nodes=[node.name], scaling_ops=len(post), open=False))
    return out


def max_over_channels(node, lw, x):
    """The Tandem unit's max across each pixel's groups and lanes into its channel 0 (a post-op
    layer), then channel 0 alone (a view)."""
    from systolix.lowering.ops.tandem_functions import ChannelMax  # noqa: PLC0415

    name = f"{node.outputs[0]}/max"
    full = lw.new_act(name, x.C, x.H, x.W)
    lw.layers.append(ConvLayer(f"{node.name}/max", [ConvInput(x, diagonal=np.ones((x.C, 1, 1), np.float32))], full,
                               np.zeros(x.C, np.float32), (1, 1), post_ops=[ChannelMax(node=node.name, channels=x.C)],
                               ops=[node.op_type], nodes=[node.name]))
    return Activation(f"{node.outputs[0]}/channel0", 1, x.H, x.W, lw.N, parent=(full, 0))


def lower_reduction(node, lw, op: str) -> None:
    """ReduceMean / ReduceSum / ReduceMax by the plan ``reduce_plan`` accepted."""
    kernel, channels = reduce_plan(node, lw, op)
    x = lw.act_of(node, 0)
    final = node.outputs[0]
    if kernel != (1, 1):
        name = f"{final}/pixels" if channels else final
        if op == "ReduceMax":
            out = lw.new_act(name, x.C, x.H // kernel[0], x.W // kernel[1])
            lw.layers.append(MaxPoolLayer(node.name if name == final else name, x, out, kernel, kernel, ops=[op], nodes=[node.name]))
            x = out
        else:
            x = average(node, lw, x, kernel, kernel, (1, 1), (0, 0, 0, 0), x.H // kernel[0], x.W // kernel[1], True, op,
                        total=op == "ReduceSum", name=name)
    if channels and op == "ReduceMax":
        x = max_over_channels(node, lw, x)
    elif channels:
        x = sum_over_channels(node, lw, x, node.name if kernel == (1, 1) else f"{node.name}/channels", op == "ReduceMean")
    elif kernel == (1, 1):  # every reduced axis has size 1: a copy
        out = lw.new_act(final, x.C, x.H, x.W)
        lw.add(ConvLayer(node.name, [ConvInput(x, diagonal=np.ones((x.C, 1, 1), np.float32))], out, np.zeros(x.C, np.float32),
                         (1, 1), ops=[op], nodes=[node.name]))
        x = out
    bind_reduced(node, lw, x)


class _Reduce(OpHandler):
    op = ""

    def check(self, node, lw):
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        plan = reduce_plan(node, lw, self.op)
        return plan if isinstance(plan, str) else None

    def lower(self, node, lw):
        lower_reduction(node, lw, self.op)


@handles("ReduceSum")
class ReduceSum(_Reduce):
    op = "ReduceSum"


@handles("ReduceMax")
class ReduceMax(_Reduce):
    op = "ReduceMax"
