"""The small test models: they build, are valid ONNX, run in onnxruntime with sane activations, are
deterministic, say what they claim (ops, attributes, opsets), and the helpers around them work."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import systolix.models as zoo
from systolix.errors import SystolixError

pytestmark = pytest.mark.needs_onnxruntime

SMALL = [n for n in zoo.names(large=False) if n != "digits_cnn"]
# Structure only (no calibration), to choose parameters at collection time.
_SKELETONS = {n: zoo.build(n, unit_scale=False) for n in SMALL}
WITH_BN = [n for n, m in _SKELETONS.items() if any(node.op_type == "BatchNormalization" for node in m.graph.node)]
CLASSIFIERS = [n for n, m in _SKELETONS.items()
               if {p.key: p.value for p in m.metadata_props}.get("systolix.kind") == "classifier"]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _all_tensors(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    """Every node output's value (written here, independently of the library's helpers)."""
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    declared = {o.name for o in extended.graph.output}
    names = [o for n in model.graph.node for o in n.output if o]
    for name in names:
        if name not in declared:
            extended.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None))
    # UNDEFINED is not accepted by onnxruntime: take types from shape inference
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    for out in extended.graph.output:
        if out.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            out.type.tensor_type.elem_type = types.get(out.name, onnx.TensorProto.FLOAT)
    values = _session(extended).run(names, feeds)
    return dict(zip(names, values, strict=True))


@pytest.fixture(scope="module")
def built() -> dict[str, onnx.ModelProto]:
    return {n: zoo.build(n) for n in SMALL}


def test_registry_lists_every_family():
    families = {s.family for s in zoo.MODELS.values()}
    assert families == {"benchmark", "network", "classic", "transformer", "ops", "host", "cnn", "bad"}
    for name, spec in zoo.MODELS.items():
        assert spec.name == name and spec.description and callable(spec.builder)
    # the catalogue covers the awkward cases by name
    for needed in ("ops/conv_dilated_17ch", "ops/conv_auto_same_lower", "ops/avgpool_3x3_pad_exclude",
                   "ops/avgpool_3x3_pad_include", "ops/split_unaligned", "ops/pad_reflect",
                   "ops/resize_linear_align_corners", "ops/upsample_nearest", "host/softmax", "host/lrn"):
        assert needed in zoo.MODELS


@pytest.mark.parametrize("name", SMALL)
def test_small_model_runs_with_sane_activations(name, built):
    model = built[name]
    onnx.checker.check_model(model, full_check=True)
    feeds = zoo.example_inputs(model, seed=3)
    declared = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.output}
    values = _all_tensors(model, feeds)
    for out, shape in declared.items():
        assert list(values[out].shape) == shape, out
    for tensor, value in values.items():
        if value.dtype == np.float32:
            assert np.all(np.isfinite(value)), tensor
            assert np.abs(value).max() < 64, f"{name}: {tensor} reaches {np.abs(value).max():.1f}"
    # not a dead network: the outputs carry signal
    for out in declared:
        assert np.abs(values[out]).max() > 0.05, out


@pytest.mark.parametrize("name", WITH_BN)
def test_batchnorm_outputs_are_near_unit_scale(name, built):
    """Calibration: on inputs it never saw, each BN's output has spread near its gamma (0.7..1.3)."""
    model = built[name]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    samples = zoo.example_input_set(model, 6, seed=11)
    per_sample = [_all_tensors(model, f) for f in samples]
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        y = np.concatenate([v[node.output[0]] for v in per_sample])
        axes = tuple(a for a in range(y.ndim) if a != 1)
        spread = y.std(axis=axes)
        # compare the median channel with the median gamma: robust to a few dead channels
        assert 0.4 < np.median(spread) / np.median(np.abs(inits[node.input[1]])) < 2.5, node.name
        # and the placeholder statistics (0, 1) were really replaced
        assert not np.all(inits[node.input[4]] == 1.0), node.name


def test_there_are_classifiers():
    assert {"resnet20v2", "mlp", "mobilenetv2_block", "cnn/tiny", "ops/flatten_gemm"} <= set(CLASSIFIERS)


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classifiers_are_not_degenerate(name, built):
    model = built[name]
    sess = _session(model)
    classes = [int(np.argmax(sess.run(None, f)[0])) for f in zoo.example_input_set(model, 30, seed=5)]
    assert len(set(classes)) >= 4, classes


@pytest.mark.parametrize("name", ["cnn/tiny", "cnn/odd_mixed", "mobilenetv2_block", "ops/constant_subgraphs",
                                  "ops/reshape_shape_arith", "mlp"])
def test_build_is_deterministic(name):
    assert zoo.build(name).SerializeToString() == zoo.build(name).SerializeToString()


def test_seed_changes_weights():
    a = zoo.build("ops/conv3x3_3to5")
    b = zoo.build("ops/conv3x3_3to5", seed=123)
    assert a.SerializeToString() != b.SerializeToString()


def _opsets(name):
    spec = zoo.MODELS[name]
    allowed = set(range(spec.min_opset, spec.max_opset + 1))
    return sorted({spec.min_opset, spec.default_opset, spec.max_opset} | ({11, 18} & allowed))


@pytest.mark.parametrize("name", SMALL)
def test_every_opset_spelling_computes_the_same(name):
    """The same model written for different opsets (Clip/Split/Pad/Squeeze attributes or inputs,
    Dropout ratio, Gemm C...) computes the same outputs in onnxruntime."""
    results = {}
    for opset in _opsets(name):
        model = zoo.build(name, opset=opset)
        assert model.opset_import[0].version == opset
        feeds = zoo.example_inputs(model, seed=1)
        results[opset] = _session(model).run(None, feeds)
    reference = results[zoo.MODELS[name].default_opset]
    for opset, outs in results.items():
        for got, want in zip(outs, reference, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at opset {opset}")


def test_opset_rules_are_enforced():
    with pytest.raises(SystolixError, match="opsets 11..21"):
        zoo.build("ops/gemm_no_c", opset=10)
    with pytest.raises(SystolixError, match="opsets 9..9"):
        zoo.build("ops/upsample_nearest", opset=13)
    with pytest.raises(SystolixError, match="exists at opsets 9..21, not 8"):
        zoo.build("mlp", opset=8)
    # the builder itself refuses an attribute its opset lacks, rather than dropping it
    from systolix.models._graph import GraphBuilder

    b = GraphBuilder("probe", 9, 0)
    with pytest.raises(SystolixError, match="ceil_mode needs opset >= 10"):
        zoo.ops.CASES["ops/maxpool_ceil"].draw(b)
    b = GraphBuilder("probe", 10, 0)
    x = b.input("x", [1, 3, 4, 4])
    with pytest.raises(SystolixError, match="opset 10 has only scales, asymmetric"):
        b.resize(x, scales=[1, 1, 2, 2], coordinate_transformation_mode="half_pixel")


def test_unknown_names_and_options_are_clear_errors():
    with pytest.raises(SystolixError, match=r"unknown model 'resnet20'.*resnet20v2"):
        zoo.build("resnet20")
    with pytest.raises(SystolixError, match="unknown option.*depth"):
        zoo.build("resnet20v2", depth=56)


def test_ops_carry_the_attributes_their_names_promise(built):
    def attrs(model, op):
        node = next(n for n in model.graph.node if n.op_type == op)
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    assert attrs(built["ops/conv_auto_same_lower"], "Conv")["auto_pad"] == b"SAME_LOWER"
    assert attrs(built["ops/conv_dilated_17ch"], "Conv")["dilations"] == [2, 2]
    assert attrs(built["ops/conv_depthwise_17ch"], "Conv")["group"] == 17
    assert attrs(built["ops/avgpool_3x3_pad_exclude"], "AveragePool")["count_include_pad"] == 0
    assert attrs(built["ops/avgpool_3x3_pad_include"], "AveragePool")["count_include_pad"] == 1
    assert attrs(built["ops/maxpool_ceil"], "MaxPool")["ceil_mode"] == 1
    resize = attrs(built["ops/resize_nearest_align_corners"], "Resize")
    assert resize["coordinate_transformation_mode"] == b"align_corners" and resize["mode"] == b"nearest"
    assert attrs(built["ops/pad_reflect"], "Pad")["mode"] == b"reflect"
    assert attrs(built["ops/gemm_transa"], "Gemm")["transA"] == 1
    assert {n.op_type for n in built["host/lrn"].graph.node} >= {"LRN", "Conv"}
    assert {n.op_type for n in built["ops/reshape_shape_arith"].graph.node} >= {"Shape", "Gather", "Concat", "Reshape"}
    assert "Upsample" in {n.op_type for n in built["ops/upsample_linear"].graph.node}
    assert "Resize" in {n.op_type for n in zoo.build("ops/resize_nearest_opset10").graph.node}


def test_resize_matches_numpy_nearest_asymmetric(built):
    """An independent check that the model means what it says: nearest x2 asymmetric floor is
    np.repeat, applied to the conv output (taken from onnxruntime as an intermediate)."""
    model = built["ops/resize_nearest_asymmetric_floor"]
    feeds = zoo.example_inputs(model)
    values = _all_tensors(model, feeds)
    conv = next(n for n in model.graph.node if n.op_type == "Conv").output[0]
    expected = values[conv].repeat(2, axis=2).repeat(2, axis=3)
    np.testing.assert_array_equal(values["y"], expected)


def test_conv_model_matches_numpy_convolution(built):
    """ops/conv_dilated_stride2 computed by a direct NumPy convolution of its own weights."""
    model = built["ops/conv_dilated_stride2"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = model.graph.node[0]
    w, bias = inits[node.input[1]], inits[node.input[2]]
    x = zoo.example_inputs(model)["x"][0].astype(np.float64)
    xp = np.pad(x, ((0, 0), (2, 2), (2, 2)))
    oh, ow = (xp.shape[1] - 5) // 2 + 1, (xp.shape[2] - 5) // 2 + 1
    want = np.zeros((w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, 2 * i:2 * i + 5:2, 2 * j:2 * j + 5:2]
            want[:, i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + bias
    got = _session(model).run(None, zoo.example_inputs(model))[0][0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_macs_and_parameters_by_hand(built):
    st = zoo.model_stats(built["ops/conv_dilated_stride2"])
    assert st.macs == 5 * 8 * 7 * (3 * 3 * 3)           # out elements x (C_in x kh x kw)
    assert st.parameters == 5 * 3 * 3 * 3 + 5
    assert zoo.model_stats(built["ops/gemm_transa"]).macs == 3 * 17 * 33
    assert zoo.model_stats(built["ops/conv_grouped_g3"]).macs == 33 * 7 * 9 * (15 // 3) * 9
    assert zoo.model_stats(built["ops/matmul_3d_add"]).macs == 5 * 17 * 33
    mlp = zoo.model_stats(built["mlp"])
    assert mlp.macs == 37 * 61 + 61 * 29 + 29 * 10
    assert mlp.parameters == 37 * 61 + 61 + 61 * 29 + 29 + 29 * 10 + 10
    # op settings (Resize scales) are not parameters
    assert zoo.model_stats(built["ops/resize_nearest_asymmetric_floor"]).parameters == 5 * 3 * 9 + 5


def test_example_inputs_follow_shapes_layouts_and_seeds(built):
    model = built["ops/transpose_nhwc_io"]
    a = zoo.example_inputs(model, seed=0)
    assert a["x"].shape == (1, 7, 9, 5) and a["x"].dtype == np.float32
    np.testing.assert_array_equal(a["x"], zoo.example_inputs(model, seed=0)["x"])
    assert not np.array_equal(a["x"], zoo.example_inputs(model, seed=1)["x"])
    two = zoo.example_inputs(built["ops/add_two_inputs"])
    assert set(two) == {"x", "x2"} and not np.array_equal(two["x"], two["x2"])
    # image-like: smooth, so neighbouring pixels correlate strongly (noise would not)
    img = zoo.example_inputs(built["resnet20v2"] if "resnet20v2" in built else zoo.build("resnet20v2"))["x:0"][0]
    corr = np.corrcoef(img[:, :, :-1].ravel(), img[:, :, 1:].ravel())[0, 1]
    assert corr > 0.5
    assert 0.3 < img.std() < 3


def test_inputs_with_a_minimum_margin(built):
    model = built["cnn/tiny"]
    chosen = zoo.example_input_set(model, 10, seed=2, min_margin=0.5)
    sess = _session(model)
    for feeds in chosen:
        scores = np.sort(sess.run(None, feeds)[0].ravel())
        assert scores[-1] - scores[-2] >= 0.5
    with pytest.raises(SystolixError, match="margin"):
        zoo.example_input_set(model, 5, min_margin=1e6, max_tries=2)


def test_save_writes_a_loadable_file(tmp_path, built):
    path = zoo.save(built["mlp"], tmp_path / "sub" / "mlp.onnx")
    assert onnx.load(str(path)).SerializeToString() == built["mlp"].SerializeToString()
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["mlp.onnx"]


def test_digits_split_is_fixed_and_stratified():
    split = zoo.digits_split()
    assert split.heldout_x.shape == (360, 1, 8, 8) and split.train_x.shape == (1437, 1, 8, 8)
    assert split.heldout_x.dtype == np.float32 and 0 <= split.heldout_x.min() and split.heldout_x.max() <= 1
    assert np.bincount(split.heldout_y).min() >= 35          # every class present, about 36 each
    again = zoo.digits_split()
    np.testing.assert_array_equal(split.heldout_y, again.heldout_y)
    np.testing.assert_array_equal(split.heldout_x, again.heldout_x)


def test_build_cached_reuses_and_repairs(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLIX_CACHE", str(tmp_path))
    fresh = zoo.build("cnn/tiny", opset=11)
    first = zoo.build_cached("cnn/tiny", opset=11)
    files = list((tmp_path / "models").glob("*/cnn__tiny-*.onnx"))
    assert len(files) == 1
    assert first.SerializeToString() == fresh.SerializeToString()
    assert zoo.build_cached("cnn/tiny", opset=11).SerializeToString() == fresh.SerializeToString()
    files[0].write_bytes(b"not an onnx file")           # a damaged entry is rebuilt, not returned
    assert zoo.build_cached("cnn/tiny", opset=11).SerializeToString() == fresh.SerializeToString()
    assert onnx.load(str(files[0])).SerializeToString() == fresh.SerializeToString()
    zoo.build_cached("cnn/tiny")                          # other options: another entry
    assert len(list((tmp_path / "models").glob("*/cnn__tiny-*.onnx"))) == 2
    stale = tmp_path / "models" / "0123456789abcdef"          # built by older code: removed on write
    stale.mkdir()
    (stale / "cnn__tiny-0.onnx").write_bytes(b"old")
    zoo.build_cached("cnn/tiny", opset=12)
    assert not stale.exists()
    assert len(list((tmp_path / "models").glob("*/cnn__tiny-*.onnx"))) == 3
