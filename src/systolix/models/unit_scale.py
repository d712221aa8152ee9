"""Random-weight models brought to unit scale on random inputs, so activations sit near 1.

FP16BP8 fixed point spans +-128 with a resolution of 1/256, so a network whose activations drift to
1e3 or 1e-3 is useless as a compiler test. The builders draw He-initialised weights and leave each
BatchNormalization's mean and variance as placeholders; :func:`fit_batchnorms` then runs the
network in onnxruntime up to each BN in turn (on a batch of example inputs, reusing every tensor
already computed, so the whole pass costs about one forward run) and sets that BN's statistics to
the ones it sees, exactly as training-mode batch norm would.

A classifier's last dense layer gets :func:`fit_classifier_head`. Random dense weights on
pooled features give every input nearly the same logits (the features mostly share their average),
so the head is rebuilt as a nearest-prototype classifier on the few directions in which the
features vary most across inputs: classes own wide regions, the predicted class varies from input
to input, and fixed-point rounding (spread over all directions) rarely flips it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from systolix.models._graph import ModelBuildError


def session(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    """An onnxruntime CPU session; one thread by default so float sums are reproducible."""
    from systolix.onnxrt import session as ort_session

    return ort_session(model, source=model.graph.name or "model", threads=threads)


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's ONNX element type, from shape inference (what a probe output needs)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    # Shape inference needs the initializers' types and shapes, not their (possibly 100 MB of) data.
    for t in stripped.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 4096:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    types = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped, data_prop=True)
    except onnx.shape_inference.InferenceError:
        inferred = stripped
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _submodel(model, nodes, inputs, outputs, inits, types) -> onnx.ModelProto:
    used = {t for n in nodes for t in n.input}
    graph = helper.make_graph(
        nodes, "segment",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))
         for name, arr in inputs],
        [helper.make_tensor_value_info(o, types.get(o, onnx.TensorProto.FLOAT), None) for o in outputs],
        initializer=[inits[t] for t in sorted(used) if t in inits])
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def fit_batchnorms(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]],
                         min_var_ratio: float = 1e-2) -> int:
    """Set every BatchNormalization's mean/var (in place) to the statistics of its input over
    ``samples``, in graph order. Returns the number of BNs set.

    A channel whose variance is below ``min_var_ratio`` times the layer's mean variance (a dead
    channel) gets that floor, so that other inputs cannot blow it up."""
    nodes = list(model.graph.node)
    bn_positions = [i for i, n in enumerate(nodes) if n.op_type == "BatchNormalization"]
    if not bn_positions:
        return 0
    inits = {t.name: t for t in model.graph.initializer}
    types = elem_types(model)
    last_use: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            last_use[t] = i
    cache: dict[str, list[np.ndarray]] = {name: [s[name] for s in samples] for name in samples[0]}
    start = 0
    for pos in bn_positions:
        segment = nodes[start:pos]
        if segment:
            produced = [o for n in segment for o in n.output if o]
            produced_set = set(produced)
            seg_inputs = list(dict.fromkeys(t for n in segment for t in n.input
                                            if t and t not in produced_set and t not in inits))
            missing = [t for t in seg_inputs if t not in cache]
            if missing:
                raise ModelBuildError(f"unit scale: tensors {missing} are used before they are computed")
            outputs = [o for o in produced if last_use.get(o, -1) >= pos]
            sub = _submodel(model, segment, [(t, cache[t][0]) for t in seg_inputs], outputs, inits, types)
            sess = session(sub)
            results = [sess.run(outputs, {t: cache[t][k] for t in seg_inputs}) for k in range(len(samples))]
            for j, o in enumerate(outputs):
                cache[o] = [r[j] for r in results]
            for t in [t for t in cache if last_use.get(t, -1) < pos]:
                del cache[t]
        bn = nodes[pos]
        x = np.concatenate(cache[bn.input[0]], axis=0).astype(np.float64)
        axes = tuple(a for a in range(x.ndim) if a != 1)
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        var = np.maximum(var, min_var_ratio * max(float(var.mean()), 1e-6))
        inits[bn.input[3]].CopyFrom(numpy_helper.from_array(mean.astype(np.float32), bn.input[3]))
        inits[bn.input[4]].CopyFrom(numpy_helper.from_array(var.astype(np.float32), bn.input[4]))
        start = pos
    return len(bn_positions)


def run_with_tensors(model: onnx.ModelProto, names: list[str], feeds: dict[str, np.ndarray],
                     threads: int = 1) -> list[np.ndarray]:
    """Run ``model`` and return the values of the named intermediate tensors."""
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    types = elem_types(model)
    have = {o.name for o in extended.graph.output}
    for n in names:
        if n not in have:
            extended.graph.output.append(helper.make_tensor_value_info(n, types.get(n, onnx.TensorProto.FLOAT), None))
    return session(extended, threads).run(names, feeds)


def fit_classifier_head(model: onnx.ModelProto, gemm_name: str, samples: list[dict[str, np.ndarray]],
                              target_std: float = 2.0, components: int = 3, max_active: int = 10,
                              seed: int = 0) -> None:
    """Rewrite the final Gemm's weights and bias (in place): ``max_active`` classes get prototypes
    in the space of the top ``components`` principal directions of its input features over
    ``samples``, the others a bias below every active logit; logits spread by ``target_std``."""
    gemm = next((n for n in model.graph.node if n.name == gemm_name), None)
    if gemm is None or gemm.op_type != "Gemm":
        raise ModelBuildError(f"unit scale: no Gemm node named {gemm_name!r}")
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or len(gemm.input) < 3:
        raise ModelBuildError(f"unit scale: head {gemm_name!r} must be a plain Gemm with a bias")
    trans_b = bool(attrs.get("transB", 0))
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in model.graph.initializer}
    features = np.concatenate([run_with_tensors(model, [gemm.input[0]], s)[0] for s in samples], axis=0)
    features = features.reshape(features.shape[0], -1).astype(np.float64)
    classes = int(inits[gemm.input[2]].dims[0])
    mean = features.mean(axis=0)
    centred = features - mean
    _, sing, vt = np.linalg.svd(centred, full_matrices=False)
    keep = min(int(np.sum(sing > sing[0] * 1e-3)) if sing.size and sing[0] > 0 else 0, components)
    if keep == 0:
        raise ModelBuildError(f"unit scale: the features feeding {gemm_name!r} do not vary across inputs")
    # Coordinates along the strongest directions in which features vary across inputs (scaled to
    # unit spread): they carry far more signal than fixed-point rounding, which spreads everywhere.
    project = vt[:keep] / (sing[:keep, None] / np.sqrt(len(features)))
    z = centred @ project.T
    # Nearest-prototype classifier (linear: z.p - |p|^2 / 2) with prototypes spread over the inputs
    # by farthest-point sampling, so classes own wide regions and near-ties are rare.
    active = min(classes, max_active, len(z))
    chosen = [int(np.argmax((z ** 2).sum(axis=1)))]
    dist = ((z - z[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(active - 1):
        chosen.append(int(np.argmax(dist)))
        dist = np.minimum(dist, ((z - z[chosen[-1]]) ** 2).sum(axis=1))
    protos = z[chosen] * 0.5  # halfway to the chosen inputs: cells cover the centre too
    order = rng.permutation(classes)[:active]  # which class ids are the active ones
    w = np.zeros((classes, features.shape[1]))
    bias = np.zeros(classes)
    w[order] = protos @ project
    bias[order] = -0.5 * (protos ** 2).sum(axis=1) - w[order] @ mean
    logits = features @ w[order].T + bias[order]
    scale = target_std / logits.std()
    w *= scale
    bias *= scale
    # Classes without a prototype sit well below every active logit seen on the samples.
    inactive = np.setdiff1d(np.arange(classes), order)
    if inactive.size:
        floor = float((logits * scale).max(axis=1).min()) - 2 * target_std
        bias[inactive] = floor - rng.uniform(0, target_std, inactive.size)
    new_w = w if trans_b else w.T
    inits[gemm.input[1]].CopyFrom(numpy_helper.from_array(new_w.astype(np.float32), gemm.input[1]))
    inits[gemm.input[2]].CopyFrom(numpy_helper.from_array(bias.astype(np.float32), gemm.input[2]))
