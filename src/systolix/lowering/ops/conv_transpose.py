"""ConvTranspose as the DPU runs it: for strides ``(sh, sw)`` the kernel splits into ``sh x sw``
sub-kernels, one per output phase ``(a, b)`` (the output pixels ``(sh i + a, sw j + b)``), and
each is an ordinary stride-1 convolution of the original input (no zeros inserted, so no
multiplication by zero). The phase convolutions write channel-group slices of one tensor (as an
aligned Concat's inputs do) and a remap interleaves them into the output.

Which output pixel the first input pixel lands on (the pads, ``auto_pad``, ``output_shape`` and
``output_padding`` together) is read off onnxruntime, as Resize's sources are: the node run on a
one-channel random input, matched against the uncropped transposed convolution.
"""

from __future__ import annotations

import math

import numpy as np

from systolix.ir.hir import Activation, ConvInput, ConvLayer, RemapLayer
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.state import pair, refusal


def full_transposed(x: np.ndarray, k: np.ndarray, stride, dilation) -> np.ndarray:
    """The uncropped transposed convolution of one channel: ``[(H-1) s + (K-1) d + 1, ...]``."""
    H, W = x.shape
    KH, KW = k.shape
    out = np.zeros(((H - 1) * stride[0] + (KH - 1) * dilation[0] + 1, (W - 1) * stride[1] + (KW - 1) * dilation[1] + 1))
    for kh in range(KH):
        for kw in range(KW):
            r, c = kh * dilation[0], kw * dilation[1]
            out[r:r + (H - 1) * stride[0] + 1:stride[0], c:c + (W - 1) * stride[1] + 1:stride[1]] += k[kh, kw] * x
    return out


def crop_origin(node, lw, H: int, W: int, KH: int, KW: int, OH: int, OW: int):
    """``(top, left)``: where the output starts in the uncropped result (negative: before it), as
    onnxruntime computes it; None when no shift matches."""
    key = ("conv transpose origin", node.name, H, W)
    if key not in lw.probes:
        import onnx

        from systolix.onnxrt import session

        rng = np.random.default_rng(0)
        x = rng.integers(1, 9, (H, W)).astype(np.float32)
        k = rng.integers(1, 9, (KH, KW)).astype(np.float32)
        attrs = {a: v for a, v in node.attrs.items() if a != "group"}
        proto = onnx.helper.make_node("ConvTranspose", ["x", "k"], ["y"], **attrs)
        graph = onnx.helper.make_graph(
            [proto], "probe", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, H, W])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(k[None, None], "k")])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", lw.g.opset)])
        model.ir_version = min(model.ir_version, 8)
        y = session(model, source=f"node {node.name!r} (ConvTranspose)").run(None, {"x": x[None, None]})[0][0, 0]
        full = full_transposed(x, k, *lw_geometry(node)[:2])
        FH, FW = full.shape

        big = np.zeros((FH + 2 * OH, FW + 2 * OW))  # the uncropped result, zeros past its ends
        big[OH:OH + FH, OW:OW + FW] = full

        def matches(top, left):
            return np.array_equal(big[OH + top:OH + top + OH, OW + left:OW + left + OW], y)

        found = None
        if y.shape == (OH, OW):
            # The spec's pads first (and SAME_UPPER/SAME_LOWER read the other way), then any shift
            # of a small output.
            guesses = [spec_origin(node, H, W, KH, KW, OH, OW, upper) for upper in (True, False)]
            if OH * OW * (FH + OH) * (FW + OW) <= 10 ** 8:
                guesses += [(t, u) for t in range(-OH, FH + 1) for u in range(-OW, FW + 1)]
            found = next((g for g in guesses if matches(*g)), None)
        lw.probes[key] = found
    return lw.probes[key]


def spec_origin(node, H: int, W: int, KH: int, KW: int, OH: int, OW: int, upper: bool):
    """``(top, left)`` as the ONNX spec derives them from pads, ``auto_pad`` and the output size
    (``upper``: where SAME_UPPER puts the odd pixel)."""
    auto = node.attr("auto_pad", "NOTSET")
    if node.attr("output_shape") is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        pads = node.attr("pads") or [0, 0, 0, 0]
        return int(pads[0]), int(pads[1])
    stride, dil, _ = lw_geometry(node)
    opad = pair(node.attr("output_padding"), (0, 0))
    origin = []
    for size, k, s, d, op, out in ((H, KH, stride[0], dil[0], opad[0], OH), (W, KW, stride[1], dil[1], opad[1], OW)):
        total = s * (size - 1) + op + (k - 1) * d + 1 - out
        origin.append(total // 2 if (auto == "SAME_UPPER") == upper else total - total // 2)
    return tuple(origin)


def lw_geometry(node):
    """``(stride, dilation, group)`` from the node's attributes."""
    return pair(node.attr("strides"), (1, 1)), pair(node.attr("dilations"), (1, 1)), int(node.attr("group", 1))


def phase_taps(a: int, origin: int, K: int, s: int, d: int):
    """Phase ``a`` along one axis: ``(kernel, pad, dilation)`` of the stride-1 conv computing the
    output pixels ``s i + a``; ``kernel[t]`` is the original tap it uses (None: a zero tap)."""
    taps = sorted(((a + origin - k * d) // s, k) for k in range(K) if (a + origin - k * d) % s == 0)
    if not taps:
        return [None], 0, 1
    step = d // math.gcd(d, s)  # consecutive taps of one phase sit this far apart in the input
    first = taps[0][0]
    lead = max(0, -(-first // step))  # zero taps in front, so that the conv's pad is not negative
    first -= lead * step
    kernel = [None] * (lead + (taps[-1][0] - taps[0][0]) // step + 1)
    for off, k in taps:
        kernel[(off - first) // step] = k
    return kernel, -first, step


def _geometry(node, lw, x):
    """``(weights, bias, stride, dilation, group, origin, OH, OW)``, or the reason it cannot run."""
    w = lw.const(node, 1)
    if w.ndim != 4:
        return f"only 2-D transposed convolutions run on the accelerator (the weights have {w.ndim} axes)"
    b = lw.opt_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2] and b is None:
        return "its bias is computed, not a constant"
    stride, dil, group = lw_geometry(node)
    if w.shape[0] != x.C or x.C % group:
        return f"the weights expect {w.shape[0]} input channels in {group} groups; the input has {x.C}"
    out_shape = lw.shape(node.outputs[0])
    if len(out_shape) != 4 or out_shape[0] != 1 or out_shape[1] != w.shape[1] * group:
        return f"output shape {list(out_shape)} is not [1, {w.shape[1] * group}, H, W]"
    OH, OW = out_shape[2], out_shape[3]
    origin = crop_origin(node, lw, x.H, x.W, w.shape[2], w.shape[3], OH, OW)
    if origin is None:
        return "onnxruntime's output is not a crop of the transposed convolution (unexpected pads or output_shape)"
    return w, b, stride, dil, group, origin, OH, OW


@handles("ConvTranspose")
class ConvTranspose(OpHandler):
    def check(self, node, lw):
        return (lw.activation_reason(node, 0) or lw.const_reason(node, 1, "weights")
                or refusal(_geometry(node, lw, lw.input_activation(node, 0))))

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        w, b, (sh, sw), (dh, dw), group, (top, left), OH, OW = _geometry(node, lw, x)
        cin, cog, KH, KW = w.shape
        cout, cig = cog * group, cin // group
        # As a Conv's weights: [Cout, Cin, KH, KW], zero between groups.
        dense = np.zeros((cout, cin, KH, KW), np.float32)
        for g in range(group):
            dense[g * cog:(g + 1) * cog, g * cig:(g + 1) * cig] = w[g * cig:(g + 1) * cig].transpose(1, 0, 2, 3)
        depthwise = group == cin == cout
        bias = np.zeros(cout, np.float32) if b is None else np.asarray(b, np.float32).reshape(cout)
        Hq, Wq = -(-OH // sh), -(-OW // sw)  # every phase computes this many rows and columns
        G = -(-cout // lw.N)
        phases = lw.new_act(f"{node.outputs[0]}:phases", sh * sw * G * lw.N, Hq, Wq)
        for a in range(sh):
            rows, pt, step_h = phase_taps(a, top, KH, sh, dh)
            for c in range(sw):
                cols, pl, step_w = phase_taps(c, left, KW, sw, dw)
                p = a * sw + c
                sub = np.zeros((cout, cin, len(rows), len(cols)), np.float32)
                for t, kh in enumerate(rows):
                    for u, kw in enumerate(cols):
                        if kh is not None and kw is not None:
                            sub[:, :, t, u] = dense[:, :, kh, kw]
                conv_in = (ConvInput(x, diagonal=sub[np.arange(cout), np.arange(cout)]) if depthwise else ConvInput(x, sub))
                pb = max(0, Hq - 1 + (len(rows) - 1) * step_h + 1 - x.H - pt)
                pr = max(0, Wq - 1 + (len(cols) - 1) * step_w + 1 - x.W - pl)
                part = Activation(f"{node.outputs[0]}:phase{a}{c}", cout, Hq, Wq, lw.N, parent=(phases, p * G))
                taps = sum(kh is not None for kh in rows) * sum(kw is not None for kw in cols)
                lw.add(ConvLayer(f"{node.name}/phase{a}{c}", [conv_in], part, bias, (len(rows), len(cols)), (1, 1),
                                 (step_h, step_w), (pt, pl, pb, pr), ops=["ConvTranspose"], nodes=[node.name],
                                 macs=int(cout * Hq * Wq * cig * taps), open=False))
        # Interleave: output pixel (sh i + a, sw j + c) is phase (a, c)'s pixel (i, j).
        oh, ow = np.meshgrid(np.arange(OH), np.arange(OW), indexing="ij")
        source = np.stack([oh // sh, ow // sw], axis=-1)
        out = lw.new_act(node.outputs[0], cout, OH, OW)
        lw.add(RemapLayer(f"{node.name}/interleave", phases, out, source, ops=["ConvTranspose"], nodes=[node.name],
                          group_offset=((oh % sh) * sw + ow % sw) * G), node.outputs[0])
