"""The error bound the compiled models are held to: a statistical model of FP16BP8 rounding.

Derivation (FP16BP8, one LSB = 2^-8). Every rounding the accelerator does (a float input or
weight to fixed point, round half up; each product ``rne(x*w / 2^8)``) errs by at most half an
LSB and, over many values, is spread uniformly: variance ``VR = (2^-8)^2 / 12``. A matrix layer
``y = b + sum_k w_k x_k`` over ``K`` terms therefore adds to each output an error of variance

    VR * (1 + K)             bias and the K rounded products
  + VR * sum_k x_k^2         the rounded weights, each times its input
  + sum_k w_k^2 * var(x)     the error its inputs already carry

(the errors are independent and zero-mean, so variances add). Elementwise ops are 1-Lipschitz
(ReLU, clip, max, pooling, copies) or scale the variance by their constant squared (BN, Mul,
LeakyRelu's slope), plus one more rounding. The bound on every output is ``8 * sigma + 2^-8``:
eight standard deviations (a Gaussian exceeds 5.3 sigma once in a million values) and one LSB
for the final rounding. ``sum_k x_k^2`` uses onnxruntime's own activations (``K * mean(x^2)``),
``sum_k w_k^2`` the largest over output channels. Nothing here looks at our compiled output.

Transformers (``output_bounds``): LayerNormalization, Softmax, the MatMul of two computed tensors
(attention), by the same rules (their comments below). ``simulated_output_bounds`` carries the
same per-op variances through the network by noisy onnxruntime runs instead of the algebra.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from systolix.lowering.ops import gelu, hardswish, mish, sigmoid, softplus, tanh

LSB = 2.0 ** -8
VR = LSB * LSB / 12.0
SIGMAS = 8.0

# Activations the accelerator approximates with a SIMD sequence: (largest slope, the sequence's
# largest error over every FP16BP8 input in LSB, as the README's table states it).
APPROXIMATED = {"HardSwish": (1.5, hardswish.MAX_ERROR_LSB), "Sigmoid": (0.25, sigmoid.MAX_ERROR_LSB),
                "Tanh": (1.0, tanh.MAX_ERROR_LSB), "Gelu": (1.13, gelu.MAX_ERROR_LSB),
                "Softplus": (1.0, softplus.MAX_ERROR_LSB), "Mish": (1.09, mish.MAX_ERROR_LSB)}


# Ops the Tandem unit computes by range reduction and Newton steps, each with its measured largest
# error against the float function in LSB (the op's lowering module states it as MAX_ERROR_LSB;
# Softmax: ``benchmarks/bench_softmax_tandem.py``'s 0.501 LSB against NumPy on the unit's own
# inputs). An op still on the host (float32 in onnxruntime) errs by its output's rounding, half
# an LSB, which an op without a stated figure is held to.
def _unit_error_lsb(module: str, default: float = 0.5) -> float:
    import importlib

    try:
        return float(importlib.import_module(f"systolix.lowering.ops.{module}").MAX_ERROR_LSB)
    except (ImportError, AttributeError):
        return default


UNIT_ERROR_LSB = {"Softmax": 0.51, "LayerNormalization": _unit_error_lsb("layer_norm")}


def all_values(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the model as onnxruntime computes it."""
    sess = _probe_session(model)
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(names, feeds)))
    values.update(feeds)
    return values


# The last few models' sessions with every tensor an output: a test that bounds 1,000 inputs of
# one model built a session for each (ResNet-20 v2's 1,000 references: 43 s, 27 s with one).
_PROBES: dict[bytes, ort.InferenceSession] = {}
_PROBES_KEPT = 4


def _probe_session(model: onnx.ModelProto) -> ort.InferenceSession:
    key = hashlib.sha256(model.SerializeToString(deterministic=True)).digest()
    sess = _PROBES.get(key)
    if sess is not None:
        return sess
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    typed = onnx.shape_inference.infer_shapes(probe)
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in list(typed.graph.value_info) + list(typed.graph.output)}
    have = {o.name for o in probe.graph.output}
    for n in probe.graph.node:
        for o in n.output:
            if o and o not in have:
                probe.graph.output.append(onnx.helper.make_tensor_value_info(o, elem.get(o, onnx.TensorProto.FLOAT), None))
                have.add(o)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    if len(_PROBES) >= _PROBES_KEPT:
        _PROBES.pop(next(iter(_PROBES)))
    _PROBES[key] = sess
    return sess


def _channels(shape) -> int | None:
    shape = tuple(shape)
    if len(shape) == 4:
        return shape[1]
    if len(shape) in (2, 3):
        return shape[-1]
    return None


def _fraction(x, predicate, channels: int, out=None) -> np.ndarray:
    """Per channel, the fraction of values where an activation passes its input's error on
    (``predicate``; or, given the output, where output equals input: the linear range), with a
    margin of 4 LSB around the kinks, where a small error can cross over."""
    if x is None:
        return np.ones(channels)
    x = np.asarray(x, np.float64)
    if out is not None:
        passed = np.abs(np.asarray(out, np.float64) - x) <= 4 * LSB
    else:
        passed = predicate(x + 4 * LSB)
    if channels > 1 and x.ndim in (2, 3, 4) and _channels(x.shape) == channels:
        axis = 1 if x.ndim == 4 else x.ndim - 1
        other = tuple(a for a in range(x.ndim) if a != axis)
        return np.mean(passed, axis=other)
    return np.array([float(np.mean(passed))])


def _erf_gelus(model, consts, consumers) -> dict[str, str]:
    """Torch's erf GeLU, ``Div(x, sqrt 2)`` (or ``Mul(x, 1/sqrt 2)``), Erf, Add 1 and two Muls
    (by ``x`` and by 0.5, in either order), or its tanh form (Tanh of ``sqrt(2/pi) (x + 0.044715
    x^3)`` for the Erf): ``{its output: x}``, as the compiler fuses it."""
    producers = {o: n for n in model.graph.node for o in n.output}
    found = {}
    for e in model.graph.node:
        if e.op_type not in ("Erf", "Tanh") or e.input[0] not in producers:
            continue
        x = next((i for i in producers[e.input[0]].input if i not in consts), None)
        if e.op_type == "Tanh":  # sqrt(2/pi) (x + 0.044715 x^3): x is the Add's operand no Mul computes
            add = producers.get(x)
            if add is None or add.op_type != "Add":
                continue
            x = next((i for i in add.input if i not in producers or producers[i].op_type != "Mul"), None)
        adds = consumers.get(e.output[0], [])
        if x is None or len(adds) != 1 or adds[0].op_type != "Add":
            continue
        m1 = consumers.get(adds[0].output[0], [])
        if len(m1) != 1 or m1[0].op_type != "Mul":
            continue
        other = next((i for i in m1[0].input if i != adds[0].output[0]), "")
        if other in producers and producers[other].op_type == "Mul" and any(i in consts for i in producers[other].input):
            found[m1[0].output[0]] = x  # Mul(Mul(x, 0.5), 1 + erf)
        elif len(m2 := consumers.get(m1[0].output[0], [])) == 1 and m2[0].op_type == "Mul":
            found[m2[0].output[0]] = x
    return found


def _mishes(model, consumers) -> dict[str, str]:
    """``Mul(x, Tanh(Softplus(x)))`` (torch's Mish before opset 18): ``{its output: x}``, as the
    compiler fuses it into one Mish."""
    producers = {o: n for n in model.graph.node for o in n.output}
    found = {}
    for m in model.graph.node:
        if m.op_type != "Mul" or len(m.input) != 2:
            continue
        for i in (0, 1):
            t = producers.get(m.input[1 - i])
            sp = producers.get(t.input[0]) if t is not None and t.op_type == "Tanh" else None
            if sp is not None and sp.op_type == "Softplus" and sp.input[0] == m.input[i] and len(consumers.get(sp.output[0], [])) == 1:
                found[m.output[0]] = m.input[i]
    return found


def output_bounds(model: onnx.ModelProto, feeds: dict[str, np.ndarray], detail: dict | None = None) -> dict[str, float]:
    """The bound on ``max |compiled - onnxruntime|`` for each output of ``model`` on ``feeds``.

    Variances are tracked per channel where the tensor has channels (a scalar otherwise); a
    BatchNormalization or per-channel Mul right after a Conv/Gemm is folded into its weights
    first, as the compiler does, so the weights' rounding is modelled on the folded weights.
    """
    values = all_values(model, feeds)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in model.graph.output}
    var: dict[str, np.ndarray] = {name: np.full(_channels(x.shape) or 1, VR) for name, x in feeds.items()}

    def v(name: str) -> np.ndarray:
        if not name or name in consts:
            return np.zeros(1)
        return var.get(name, np.array([VR]))

    def vmax(name: str) -> float:
        return float(np.max(v(name)))

    def mean_sq(name: str) -> float:
        x = values.get(name)
        return float(np.mean(np.square(x, dtype=np.float64))) if x is not None and np.size(x) else 1.0

    def bn_scale(n) -> np.ndarray:
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        return np.asarray(consts[n.input[1]], np.float64) / np.sqrt(np.asarray(consts[n.input[4]], np.float64) + eps)

    folded: set[str] = set()
    softmax_rel: dict[str, tuple[float, float]] = {}  # Softmax outputs: (relative variance, absolute variance)
    erf_gelus = _erf_gelus(model, consts, consumers)
    mishes = _mishes(model, consumers)
    for n in model.graph.node:
        ins = list(n.input)
        x = ins[0] if ins else ""
        op = n.op_type
        if n.output[0] in erf_gelus:  # the last node of 0.5 x (1 + erf(x / sqrt 2)): one GeLU
            slope, e_lsb = APPROXIMATED["Gelu"]
            out_var = slope * slope * v(erf_gelus[n.output[0]]) + (e_lsb * LSB) ** 2 / 3
        elif n.output[0] in mishes:  # x tanh(softplus(x)): one Mish
            slope, e_lsb = APPROXIMATED["Mish"]
            out_var = slope * slope * v(mishes[n.output[0]]) + (e_lsb * LSB) ** 2 / 3
        elif n.name in folded and n.name:
            out_var = v(x)
        elif op == "MatMul" and ins[0] in softmax_rel and ins[1] not in consts:
            # Attention's P V with P a Softmax output: P's error is relative, |dP_ik| ~ P_ik
            # sqrt(rel), so output (i, j) gets sum_k P_ik^2 (V_kj^2 rel + var V) plus the unit's
            # absolute error on each P_ik times V_kj, and the K rounded products.
            p_ = np.asarray(values[ins[0]], np.float64)
            v_ = np.asarray(values[ins[1]], np.float64)
            rel, e_abs = softmax_rel[ins[0]]
            k = p_.shape[-1]
            per_out = (p_ ** 2) @ (v_ ** 2) * rel + np.sum(p_ ** 2, axis=-1, keepdims=True) * vmax(ins[1])
            per_out = per_out + e_abs * np.sum(v_ ** 2, axis=-2, keepdims=True)
            out_var = float(np.max(per_out)) + VR * (1 + k)
        elif op == "MatMul" and ins[0] not in consts and ins[1] not in consts:
            # Two computed tensors (attention's Q K^T and P V): y = sum_k a_k b_k over K terms,
            # each product rounded once (K VR), each input's error times the other's values.
            a, b = values.get(ins[0]), values.get(ins[1])
            k = int(np.shape(a)[-1]) if a is not None else 1
            out_var = VR * (1 + k) + k * (mean_sq(ins[1]) * vmax(ins[0]) + mean_sq(ins[0]) * vmax(ins[1]))
        elif op == "LayerNormalization":
            # y = (x - mean) / sqrt(var + eps) * gamma + beta: the input's error scaled by the
            # largest gamma / sigma over tokens (sigma from onnxruntime's own values along the
            # normalised axis), the unit's (or host's) approximation error times the largest
            # |gamma|, and the rounding of the scale-and-shift (a product and an add).
            eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
            gamma = np.abs(np.asarray(consts.get(ins[1], np.ones(1)), np.float64))
            xs = np.asarray(values[x], np.float64)
            sigma_min = float(np.sqrt(np.min(np.var(xs, axis=-1)) + eps))
            gain = float(gamma.max()) / sigma_min
            e_lsb = UNIT_ERROR_LSB["LayerNormalization"]
            out_var = (gain * gain * vmax(x) + (e_lsb * LSB * max(1.0, float(gamma.max()))) ** 2 / 3
                       + VR * (2 + mean_sq(n.output[0])))
        elif op == "Softmax":
            # dy_i = y_i (dx_i - sum_j y_j dx_j): at most 2 max(y)^2 times the input's variance,
            # plus the unit's own error (a uniform +-E: E^2 / 3).
            ys = np.asarray(values[n.output[0]], np.float64)
            e_lsb = UNIT_ERROR_LSB["Softmax"]
            out_var = 2.0 * float(np.max(ys)) ** 2 * vmax(x) + (e_lsb * LSB) ** 2 / 3 + VR
            softmax_rel[n.output[0]] = (2.0 * vmax(x), (e_lsb * LSB) ** 2 / 3 + VR)
        elif op in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            wname = ins[1] if ins[1] in consts else ins[0]
            xname = ins[0] if wname == ins[1] else ins[1]
            w = np.asarray(consts.get(wname, values.get(wname)), np.float64)
            if op == "ConvTranspose":
                # [in, out/group, KH, KW] -> [out, in/group, taps]: every tap counted, as if each
                # output summed them all (an output sums about 1/stride^2 of them).
                group = next((a.i for a in n.attribute if a.name == "group"), 1)
                cig, cog = w.shape[0] // group, w.shape[1]
                wm = w.reshape(group, cig, cog, -1).transpose(0, 2, 1, 3).reshape(group * cog, cig, -1)
            elif op == "Conv":
                wm = w.reshape(w.shape[0], w.shape[1], -1)  # [out, in/group, taps]
            else:
                trans_b = op == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)
                m2 = (w.T if trans_b else w).reshape(-1, w.shape[0] if trans_b else w.shape[-1])
                alpha = next((a.f for a in n.attribute if a.name == "alpha"), 1.0)
                wm = (alpha * m2.T)[:, :, None]  # [out, in, 1]
            # Fold a following BatchNormalization / per-channel Mul, as the compiler does.
            nxt = consumers.get(n.output[0], [])
            if len(nxt) == 1 and n.output[0] not in outputs:
                f = nxt[0]
                if f.op_type == "BatchNormalization":
                    wm = wm * bn_scale(f)[:, None, None]
                    folded.add(f.name)
                elif f.op_type == "Mul" and any(i in consts for i in f.input):
                    c = np.asarray(next(consts[i] for i in f.input if i in consts), np.float64).reshape(-1)
                    if c.size in (1, wm.shape[0]):
                        wm = wm * np.broadcast_to(c, (wm.shape[0],))[:, None, None]
                        folded.add(f.name)
            k = wm.shape[1] * wm.shape[2]
            vin = v(xname)
            group_in = wm.shape[1]
            if op in ("Conv", "ConvTranspose") and vin.size > 1:
                groups = vin.size // group_in
                per_out = wm.shape[0] // max(groups, 1)
                vin_o = np.stack([vin[(o // per_out) * group_in:(o // per_out + 1) * group_in] for o in range(wm.shape[0])])
                prop = np.sum(np.square(wm) * vin_o[:, :, None], axis=(1, 2))
            else:
                prop = np.sum(np.square(wm), axis=(1, 2)) * float(np.max(vin))
            out_var = VR * (1 + k) + VR * k * mean_sq(xname) + prop
        elif op == "BatchNormalization":
            out_var = bn_scale(n) ** 2 * v(x) + VR * (2 + mean_sq(x))
        elif op in ("Mul", "Div", "Add", "Sub"):
            c = [consts[i] for i in ins if i in consts]
            t = [i for i in ins if i not in consts]
            if op in ("Mul", "Div") and c:
                s = np.abs(np.asarray(c[0], np.float64))
                s = 1.0 / s.min() if op == "Div" else s.max()
                out_var = s * s * v(t[0]) + VR * (2 + mean_sq(t[0]))
            elif op in ("Mul", "Div"):
                out_var = mean_sq(t[1]) * vmax(t[0]) + mean_sq(t[0]) * vmax(t[1]) + VR
            elif c:
                out_var = v(t[0]) + VR
            else:
                a, b = v(t[0]), v(t[1])
                out_var = (a + b if a.size == b.size else np.full(max(a.size, b.size), a.max() + b.max())) + VR
        elif op in ("LeakyRelu", "PRelu"):
            slope = next((a.f for a in n.attribute if a.name == "alpha"), 0.01) if op == "LeakyRelu" else float(np.max(np.abs(consts[ins[1]])))
            pos = _fraction(values.get(x), lambda t: t > 0, v(x).size)
            out_var = (pos + (1 - pos) * slope * slope) * v(x) + VR * (1 + mean_sq(x))
        elif op in ("Relu", "Clip"):
            # An error passes where the input is in the linear range (per channel), else it is cut off.
            out = values.get(n.output[0])
            pos = _fraction(values.get(x), None, v(x).size, out)
            out_var = pos * v(x)
        elif op in APPROXIMATED:
            # Lipschitz constant squared times the input's error, plus the SIMD sequence's own
            # error against the float function (its measured maximum E, as a uniform +-E: E^2 / 3).
            slope, e_lsb = APPROXIMATED[op]
            out_var = slope * slope * v(x) + (e_lsb * LSB) ** 2 / 3
        elif op in ("AveragePool", "GlobalAveragePool", "ReduceMean", "Resize", "Upsample"):
            out_var = v(x) + 3 * VR
        elif op == "Concat":
            parts = [v(i) for i in ins]
            out_var = np.concatenate(parts) if all(p.size > 1 for p in parts) else np.array([max(p.max() for p in parts)])
        elif op in ("MaxPool", "GlobalMaxPool", "Identity", "Dropout", "Pad"):
            out_var = v(x)
        else:  # reshapes, splits, host ops: the largest variance of any input, per tensor
            out_var = np.array([max(vmax(i) for i in ins if i)]) if ins else np.array([VR])
        for o in n.output:
            if o:
                var[o] = np.atleast_1d(np.asarray(out_var, np.float64))
                if detail is not None:  # each tensor's largest standard deviation, for diagnostics
                    detail[o] = (op, float(np.sqrt(np.max(var[o]))))
    return {o.name: SIGMAS * float(np.sqrt(np.max(var.get(o.name, np.array([VR]))))) + LSB for o in model.graph.output}


# Ops whose outputs are the same numbers moved (no rounding of their own).
_MOVES = {"Reshape", "Transpose", "Slice", "Gather", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Split",
          "MaxPool", "GlobalMaxPool", "Relu", "Dropout", "Pad", "Shape", "Cast", "Constant", "Expand"}


def simulated_output_bounds(model: onnx.ModelProto, feeds: dict[str, np.ndarray], draws: int = 12,
                            seed: int = 0) -> dict[str, float]:
    """The same rounding model as ``output_bounds``, carried through the network by simulation
    instead of worst-case algebra: each op's own rounding (the variances above: ``VR (1 + K)`` for
    a K-term product sum, ``VR`` for an element-wise op, an approximation's ``E^2 / 3``; moves
    none) and each weight's and input's rounding (``VR``) are drawn as independent uniform noise
    and added where they arise, in onnxruntime, ``draws`` times; each output's standard
    deviation is the RMS of its change, and the bound ``8 sigma + 2^-8`` as above. The algebra
    takes the largest variance over channels and tokens at every op and compounds it layer
    after layer (LayerNorm's largest gain, attention's largest weights); the simulation carries
    each element's own error through the actual network (to first order the same model, exactly
    linearised): 20 to 110 times tighter on vit_tiny and bert_tiny, twice on torch's encoder export."""
    values = all_values(model, feeds)
    for t in model.graph.initializer:
        values.setdefault(t.name, numpy_helper.to_array(t))
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    erf_gelus = _erf_gelus(model, {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, consumers)
    gelu_inner: set[str] = set()
    producers = {o: n for n in model.graph.node for o in n.output}
    for out, x in erf_gelus.items():  # the fused GeLU's inner tensors carry no rounding of their own
        stack = [producers[out]]
        while stack:
            n = stack.pop()
            for i in n.input:
                if i in producers and i != x and i not in gelu_inner:
                    gelu_inner.add(i)
                    stack.append(producers[i])
    added: dict[str, float] = {}
    for n in model.graph.node:
        op, out = n.op_type, n.output[0]
        if op in _MOVES or out in gelu_inner or values.get(out) is None or values[out].dtype != np.float32:
            continue
        if out in erf_gelus:
            added[out] = (APPROXIMATED["Gelu"][1] * LSB) ** 2 / 3 + VR
        elif op in ("MatMul", "Gemm", "Conv", "ConvTranspose"):
            w = values.get(n.input[1])
            if op == "MatMul":
                k = int(np.shape(values[n.input[0]])[-1])
            elif op == "Gemm":
                trans_a = any(a.name == "transA" and a.i for a in n.attribute)
                k = int(np.shape(values[n.input[0]])[0 if trans_a else -1])
            else:
                k = int(np.prod(np.shape(w)[1:])) if w is not None else 1
            added[out] = VR * (1 + k)
        elif op in APPROXIMATED:
            added[out] = (APPROXIMATED[op][1] * LSB) ** 2 / 3 + VR
        elif op == "Softmax":
            added[out] = (UNIT_ERROR_LSB["Softmax"] * LSB) ** 2 / 3 + VR
        elif op == "LayerNormalization":
            gamma = float(np.max(np.abs(values[n.input[1]]))) if len(n.input) > 1 and n.input[1] in values else 1.0
            added[out] = (UNIT_ERROR_LSB["LayerNormalization"] * LSB * max(1.0, gamma)) ** 2 / 3 + 2 * VR
        else:
            added[out] = VR
    # Rounded constants: the weights and biases (tensors, not the scalars of fused sequences).
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 1:
            added[t.name] = VR
    for name, x in feeds.items():
        if np.asarray(x).dtype == np.float32:
            added[name] = VR

    noisy = onnx.ModelProto()
    noisy.CopyFrom(model)
    g = noisy.graph
    renamed = {name: f"{name}__exact" for name in added}
    for n in g.node:
        for k, o in enumerate(n.output):
            if o in renamed:
                n.output[k] = renamed[o]
    for t in g.initializer:
        if t.name in renamed:
            t.name = renamed[t.name]
    for inp in g.input:
        if inp.name in renamed:
            inp.name = renamed[inp.name]
    first = []
    for name in added:
        noise = f"{name}__noise"
        g.input.append(onnx.helper.make_tensor_value_info(noise, onnx.TensorProto.FLOAT, list(np.shape(values[name]))))
        first.append(onnx.helper.make_node("Add", [renamed[name], noise], [name], name=f"{name}__rounding"))
    # Adds of the inputs and initializers go first, each node's right after it (topological order).
    order = [a for a in first if a.input[0] not in {o for n in g.node for o in n.output}]
    after: dict[str, list] = {}
    for a in first:
        if a not in order:
            after.setdefault(a.input[0], []).append(a)
    nodes = list(order)
    for n in g.node:
        nodes.append(n)
        for o in n.output:
            nodes.extend(after.get(o, []))
    del g.node[:]
    g.node.extend(nodes)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(noisy.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = [o.name for o in model.graph.output]
    rng = np.random.default_rng(seed)
    base = {name: np.asarray(x) for name, x in feeds.items()}
    sq = {o: np.zeros(np.shape(values[o])) for o in outs}
    for _ in range(draws):
        run_feeds = {renamed.get(k, k): v for k, v in base.items()}
        for name, var in added.items():
            a = float(np.sqrt(3.0 * var))
            run_feeds[f"{name}__noise"] = rng.uniform(-a, a, size=np.shape(values[name])).astype(np.float32)
        for o, y in zip(outs, sess.run(outs, run_feeds)):
            sq[o] += (np.asarray(y, np.float64) - values[o]) ** 2
    return {o: SIGMAS * float(np.sqrt(np.max(sq[o] / draws))) + LSB for o in outs}
