"""The HIR's meaning: a float evaluation, layer by layer, in NumPy.

It computes what the accelerator program computes, without rounding: every layer in program
order, on the same memory objects (a Concat or Split that aliases channel groups of another
tensor reads and writes that tensor's storage); each post-op by its own ``evaluate``. Two uses:

* calibration: the largest value each layer's accumulators hold before its accumulator
  operations, per output channel, which sets how far its weights can be amplified
  (``systolix.hir_passes.amplify``);
* testing the lowering on its own: the IR's outputs against onnxruntime's, with no fixed point
  and no scheduling in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolix.ir.hir import (
    Activation, ConvLayer, HirProgram, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer, TensorMatMulLayer)
from systolix.ir.layout import canonical_elements
from systolix.ir.postops import PART_NODE


@dataclass
class Evaluation:
    """The memory objects' contents after a run, and each conv layer's accumulator range."""

    storage: dict[int, np.ndarray] = field(default_factory=dict)  # id(root) -> [G*N, P]
    accumulator_max: dict[int, np.ndarray] = field(default_factory=dict)
    """layer index -> per output channel, the largest |value| its accumulators hold (with the
    bias, before the accumulator operations; an average pool's also through its own scaling,
    ``ConvLayer.scaling_ops``)"""
    sum_max: dict[int, np.ndarray] = field(default_factory=dict)
    """layer index -> per output channel, the largest |value| its accumulators hold once a split
    reduction's other parts are added (the last part's: ``postops.PART_NODE``)"""

    def read(self, act: Activation) -> np.ndarray:
        """``act`` as ``[C, H, W]``."""
        root, g0 = act.root()
        data = self.storage[id(root)]
        c0 = g0 * act.N
        return data[c0:c0 + act.C].reshape(act.C, act.H, act.W)

    def write(self, act: Activation, value: np.ndarray) -> None:
        root, g0 = act.root()
        data = self.storage.get(id(root))
        if data is None:
            data = np.zeros((root.G * root.N, root.P), np.float64)
            self.storage[id(root)] = data
        c0 = g0 * act.N
        data[c0:c0 + act.C] = value.reshape(act.C, -1)


def input_chw(hir: HirProgram, name: str, value: np.ndarray) -> np.ndarray:
    """A model input, in its ONNX shape (batch 1), as the ``[C, H, W]`` of its activation."""
    act = hir.inputs[name]
    shape = tuple(hir.input_shapes[name])
    x = np.asarray(value, np.float64).reshape(shape)
    if name in hir.packs:  # the activation is the packed tensor, as the driver writes it
        from systolix.runtime.layout import pack_input

        x = pack_input(x, hir.packs[name])
        shape = x.shape
    if len(shape) == 4 and name in hir.perms:
        return x[0].transpose(2, 0, 1)  # kept channels-last in DRAM
    flat = np.empty(act.C * act.P, np.float64)
    flat[canonical_elements(shape).reshape(-1)] = x.reshape(-1)
    return flat.reshape(act.C, act.H, act.W)


def output_onnx(hir: HirProgram, name: str, value: np.ndarray) -> np.ndarray:
    """An output activation's ``[C, H, W]`` as the model's ONNX-shaped output."""
    shape = tuple(hir.output_shapes[name])
    if len(shape) == 4 and name in hir.perms:
        return value.transpose(1, 2, 0).reshape(shape)
    return value.reshape(-1)[canonical_elements(shape).reshape(-1)].reshape(shape)


def taps(x: np.ndarray, OH: int, OW: int, kernel, stride, dilation, pads, fill: float):
    """Yield ``(kh, kw, window)``: the input under tap ``(kh, kw)`` for every output pixel."""
    C, H, W = x.shape
    KH, KW = kernel
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pads[0], pads[1]
    need_h = (OH - 1) * sh + (KH - 1) * dh + 1
    need_w = (OW - 1) * sw + (KW - 1) * dw + 1
    padded = np.full((C, max(need_h, pt + H), max(need_w, pl + W)), fill, x.dtype)
    padded[:, pt:pt + H, pl:pl + W] = x
    for kh in range(KH):
        for kw in range(KW):
            h0, w0 = kh * dh, kw * dw
            yield kh, kw, padded[:, h0:h0 + (OH - 1) * sh + 1:sh, w0:w0 + (OW - 1) * sw + 1:sw]


def _own_inputs(layer: ConvLayer) -> list:
    """The inputs of the layer's own sum (not those of a part summed apart, ``postops.AddPart``)."""
    parts = layer.part_inputs()
    return [inp for i, inp in enumerate(layer.inputs) if i not in parts]


def conv_sum(inputs, bias, kernel, stride, dilation, pads, OH: int, OW: int, read) -> np.ndarray:
    """``bias + sum_i conv(inputs[i])`` in float64, ``[C, OH, OW]`` (a part summed apart,
    ``postops.AddPart``; ``read(act)`` reads a tensor)."""
    acc = np.repeat(np.asarray(bias, np.float64)[:, None], OH * OW, axis=1)
    for inp in inputs:
        x = read(inp.act)
        for kh, kw, window in taps(x, OH, OW, kernel, stride, dilation, pads, 0.0):
            window = window.reshape(x.shape[0], -1)
            acc += inp.weights[:, :, kh, kw].astype(np.float64) @ window
    return acc.reshape(-1, OH, OW)


def _conv(ev: Evaluation, layer: ConvLayer, index: int) -> np.ndarray:
    out = layer.output
    # The bias first, then one tap at a time, as the array accumulates: the peak counts the
    # partial sums too (an add saturates, so a partial sum out of range is lost).
    acc = np.repeat(np.asarray(layer.bias, np.float64)[:, None], out.H * out.W, axis=1)
    peak = np.abs(acc[:, 0]) if acc.size else np.zeros(out.C)
    if layer.phases > 1:
        return _phased_conv(ev, layer, index, acc, peak)
    for inp in _own_inputs(layer):
        x = ev.read(inp.act)
        for kh, kw, window in taps(x, out.H, out.W, layer.kernel, layer.stride, layer.dilation, layer.pads, 0.0):
            window = window.reshape(x.shape[0], -1)
            if inp.weights is None:
                acc += inp.diagonal[:, kh, kw].astype(np.float64)[:, None] * window
                if acc.size:
                    peak = np.maximum(peak, np.max(np.abs(acc), axis=1))
                continue
            # A dense tap goes through the array one block of N input channels at a time.
            for c0 in range(0, x.shape[0], inp.act.N):
                c1 = min(x.shape[0], c0 + inp.act.N)
                acc += inp.weights[:, c0:c1, kh, kw].astype(np.float64) @ window[c0:c1]
                if acc.size:
                    peak = np.maximum(peak, np.max(np.abs(acc), axis=1))
    return _post_ops(ev, layer, index, acc.reshape(out.C, out.H, out.W), peak)


def _phased_conv(ev: Evaluation, layer: ConvLayer, index: int, acc: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """A conv with output phases (``ConvLayer.phases``): phase i's taps over the input's pixels
    give output columns i, i + phases, ..., tap by tap as the array accumulates."""
    out, k = layer.output, layer.phases
    acc = acc.reshape(out.C, out.H, out.W)
    for inp in _own_inputs(layer):
        x = ev.read(inp.act)
        for kh, _, window in taps(x, out.H, x.shape[2], layer.kernel, layer.stride, layer.dilation, layer.pads, 0.0):
            for i in range(k):
                cols = len(range(i, out.W, k))
                for c0 in range(0, x.shape[0], inp.act.N):
                    c1 = min(x.shape[0], c0 + inp.act.N)
                    acc[:, :, i::k] += np.einsum("oc,chw->ohw", inp.weights[:, c0:c1, kh, i].astype(np.float64),
                                                 window[c0:c1, :, :cols])
                    if acc.size:
                        peak = np.maximum(peak, np.max(np.abs(acc), axis=(1, 2)))
    return _post_ops(ev, layer, index, acc, peak)


def _post_ops(ev: Evaluation, layer: ConvLayer, index: int, acc: np.ndarray, peak: np.ndarray) -> np.ndarray:
    out = layer.output
    parts = [k for k, p in enumerate(layer.post_ops) if p.node == PART_NODE]
    summed = np.abs(acc.reshape(out.C, -1)).max(axis=1, initial=0.0) if parts else None
    for k, p in enumerate(layer.post_ops):
        acc = p.evaluate(acc, ev.read)
        if p.written is not None:
            ev.write(p.written, p.saved(acc))
        if k < layer.scaling_ops and acc.size:
            # An average pool's own multiplies run before a gain is undone: they count too.
            peak = np.maximum(peak, np.max(np.abs(acc.reshape(out.C, -1)), axis=1))
        if parts and k <= parts[-1]:
            summed = np.maximum(summed, np.abs(acc.reshape(out.C, -1)).max(axis=1, initial=0.0))
    ev.accumulator_max[index] = peak
    if parts:
        ev.sum_max[index] = summed
    return acc


def _maxpool(ev: Evaluation, layer: MaxPoolLayer) -> np.ndarray:
    return _maxpool_chw(ev.read(layer.input), layer)


def _maxpool_chw(x: np.ndarray, layer: MaxPoolLayer) -> np.ndarray:
    out = layer.output
    result = np.full((x.shape[0], out.H, out.W), -np.inf, x.dtype)
    fill = 0.0 if layer.zero_pads else -np.inf
    for _, _, window in taps(x, out.H, out.W, layer.kernel, layer.stride, layer.dilation, layer.pads, fill):
        result = np.maximum(result, window)
    return result


def evaluate(hir: HirProgram, inputs: dict[str, np.ndarray]) -> Evaluation:
    """Run ``hir`` in float64 on one set of inputs (ONNX-shaped arrays, batch 1, by input name)."""
    ev = Evaluation()
    for name, act in hir.inputs.items():
        ev.write(act, input_chw(hir, name, inputs[name]))
    for index, layer in enumerate(hir.layers):
        ev.write(layer.output, run_layer(ev, layer, index))
    return ev


def run_layer(ev: Evaluation, layer, index: int) -> np.ndarray:
    """One layer's output (``[C, H, W]``) from the tensors in ``ev``; a conv layer's accumulator
    range goes to ``ev.accumulator_max[index]``."""
    if isinstance(layer, ConvLayer):
        return _conv(ev, layer, index)
    if isinstance(layer, MaxPoolLayer):
        return _maxpool(ev, layer)
    if isinstance(layer, RemapLayer):
        x = ev.read(layer.input)
        rows, cols = layer.source[..., 0], layer.source[..., 1]
        if layer.group_offset is None:
            return x[:, rows, cols]
        channels = np.arange(layer.output.C)[:, None, None] + layer.output.N * layer.group_offset[None]
        return x[channels, rows[None], cols[None]]
    if isinstance(layer, PixelMixLayer):
        x = ev.read(layer.input).reshape(layer.input.C, -1)
        value = np.zeros((layer.output.C, layer.output.P))
        np.add.at(value.T, layer.out_pixel, (x[:, layer.in_pixel] * layer.coefficient).T)
        return value
    if isinstance(layer, ShuffleLayer):
        return ev.read(layer.input).reshape(-1)[layer.source]
    if isinstance(layer, TensorMatMulLayer):
        return _matmul_tensors(ev, layer)
    raise TypeError(f"unknown layer {layer!r}")  # pragma: no cover


def _matmul_tensors(ev: Evaluation, layer: TensorMatMulLayer) -> np.ndarray:
    a = ev.read(layer.a).reshape(layer.a.C, -1)
    b = ev.read(layer.b).reshape(layer.b.C, -1)
    out = np.zeros((layer.output.C, layer.output.P))
    for h in range(layer.heads):
        a_h, b_h = layer.head_operands(a, b, h)
        y = a_h @ b_h
        if layer.softmax:
            z = layer.scale * (y - y.max(axis=1, keepdims=True))
            y = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True) * 2.0 ** layer.out_shift
        y = y / 2.0 ** layer.a_shift
        out[h * layer.out_stride:h * layer.out_stride + layer.O] = y.T
    return out.reshape(layer.output.C, layer.output.H, layer.output.W)


def run_reference(hir: HirProgram, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The IR's outputs in float, in the model's own shapes."""
    ev = evaluate(hir, inputs)
    return {name: output_onnx(hir, name, ev.read(act)) for name, act in hir.outputs.items()}


class Runs:
    """Several runs of the same program side by side (``systolix.hir_passes.estimate_ranges``'s
    synthetic inputs): each memory object ``[R, G*N, P]`` in float32, so that a conv layer is one
    matrix product per tap and block for all runs rather than one per run (8 runs of YOLOv4-tiny
    in well under a second instead of tens of seconds one by one in float64)."""

    def __init__(self, count: int, dtype=np.float32):
        self.count = count
        self.dtype = dtype
        self.storage: dict[int, np.ndarray] = {}
        self.accumulator_max: dict[int, np.ndarray] = {}
        """layer index -> per output channel, the largest |partial or final sum| over every run
        (as ``Evaluation.accumulator_max``)"""

    def read(self, act: Activation) -> np.ndarray:
        """``act`` as ``[R, C, H, W]``."""
        root, g0 = act.root()
        c0 = g0 * act.N
        return self.storage[id(root)][:, c0:c0 + act.C].reshape(self.count, act.C, act.H, act.W)

    def write(self, act: Activation, value: np.ndarray) -> None:
        root, g0 = act.root()
        data = self.storage.get(id(root))
        if data is None:
            data = np.zeros((self.count, root.G * root.N, root.P), self.dtype)
            self.storage[id(root)] = data
        c0 = g0 * act.N
        data[:, c0:c0 + act.C] = value.reshape(self.count, act.C, -1)

    def run(self, r: int) -> Evaluation:
        """Run ``r`` alone, as an ``Evaluation`` to read from (for ``run_layer`` and post-ops)."""
        view = Evaluation()
        view.read = lambda act: self.read(act)[r]  # type: ignore[method-assign]
        return view


# Partial sums held at once by ``_conv_runs`` (floats): a chunk of the runs' output pixels small
# enough that its partial sums after every step stay in cache.
STEP_BUDGET = 1 << 19
COLUMNS = 1024


def _conv_runs(runs: Runs, layer: ConvLayer, index: int) -> np.ndarray:
    out = layer.output
    R, P, dt = runs.count, out.H * out.W, runs.dtype
    columns = R * P  # the runs side by side in each matrix's columns
    # The steps in the order ``_conv`` accumulates them (input, tap, block of N input channels),
    # each a [Cout, columns] term: per input, its coefficients per step and its taps (im2col).
    parts = []
    steps = 0
    for inp in _own_inputs(layer):
        x = runs.read(inp.act)
        C = x.shape[1]
        stacked = x.transpose(1, 0, 2, 3).reshape(C * R, x.shape[2], x.shape[3])
        windows = np.stack([w.reshape(C, columns) for _, _, w in
                            taps(stacked, out.H, out.W, layer.kernel, layer.stride, layer.dilation, layer.pads, 0.0)])
        T = windows.shape[0]
        if inp.weights is None:
            parts.append((False, inp.diagonal.reshape(C, T).T.astype(dt)[:, :, None], windows))
            steps += T
            continue
        n = inp.act.N
        B = -(-C // n)
        pad = B * n - C
        w = np.pad(inp.weights.astype(dt), ((0, 0), (0, pad), (0, 0), (0, 0))) if pad else inp.weights.astype(dt)
        w = w.reshape(out.C, B, n, T).transpose(3, 1, 0, 2).reshape(T * B, out.C, n)
        if pad:
            windows = np.pad(windows, ((0, 0), (0, pad), (0, 0)))
        parts.append((True, w, windows.reshape(T * B, n, columns)))
        steps += T * B
    bias = np.asarray(layer.bias, np.float64)
    peak = np.abs(bias) if out.C else np.zeros(0)
    acc = np.empty((out.C, columns), dt)
    # Columns a few hundred wide (efficient products), as many steps at a time as fit.
    width = min(columns, COLUMNS)
    group = max(1, STEP_BUDGET // max(1, out.C * width))
    scratch = np.empty(min(group, steps) * out.C * width, dt)
    order = [(dense, coefficients, data, k) for dense, coefficients, data in parts for k in range(0, data.shape[0], group)]
    for p0 in range(0, columns, width):
        p1 = min(columns, p0 + width)
        carry = np.broadcast_to(bias.astype(dt)[:, None], (out.C, p1 - p0))
        for dense, coefficients, data, k0 in order:
            k1 = min(data.shape[0], k0 + group)
            terms = scratch[:(k1 - k0) * out.C * (p1 - p0)].reshape(k1 - k0, out.C, p1 - p0)
            (np.matmul if dense else np.multiply)(coefficients[k0:k1], data[k0:k1, :, p0:p1], out=terms)
            terms[0] += carry
            for k in range(1, k1 - k0):  # the partial sums after each step
                np.add(terms[k], terms[k - 1], out=terms[k])
            carry = acc[:, p0:p1]
            carry[...] = terms[-1]
            if terms.size:
                peak = np.maximum(peak, np.abs(terms, out=terms).max(axis=(0, 2)))
    result = acc.reshape(out.C, R, out.H, out.W).transpose(1, 0, 2, 3)
    for k, p in enumerate(layer.post_ops):
        result = np.stack([p.evaluate(result[r], runs.run(r).read) for r in range(R)]).astype(runs.dtype)
        if p.written is not None:
            runs.write(p.written, p.saved(result))
        if k < layer.scaling_ops and result.size:
            # An average pool's own multiplies run before a gain is undone: they count too.
            peak = np.maximum(peak, np.abs(result).max(axis=(0, 2, 3)))
    runs.accumulator_max[index] = peak
    return result


def run_layer_runs(runs: Runs, layer, index: int) -> np.ndarray:
    """One layer's output for every run (``[R, C, H, W]``); a conv layer's accumulator range
    (the largest over the runs) goes to ``runs.accumulator_max[index]``."""
    if isinstance(layer, ConvLayer):
        return _conv_runs(runs, layer, index)
    if isinstance(layer, MaxPoolLayer):
        x = runs.read(layer.input)
        R, C, H, W = x.shape
        result = _maxpool_chw(x.reshape(R * C, H, W), layer)
        return result.reshape(R, C, result.shape[1], result.shape[2])
    return np.stack([run_layer(runs.run(r), layer, index) for r in range(runs.count)])
