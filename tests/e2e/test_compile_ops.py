"""Every op case of ``systolix.models`` compiled for three array sizes, run on the emulator and
compared with onnxruntime within the FP16BP8 error bound of ``tests/error_model.py``."""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest

import systolix.models as M
from systolix.compiler import compile_model
from tests.error_model import output_bounds

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

ARCHS = ["pynqz1", "ultra96v2", "zcu104"]
CASES = [n for n in M.names() if n.startswith(("ops/", "host/", "cnn/"))]
# Ops that run on the host by design (the accelerator has no instruction for them).
HOST_BY_DESIGN = {"host/softmax", "host/softsign", "host/lrn", "host/squeeze_excite"}


@functools.lru_cache(maxsize=None)
def reference(name: str):
    model = M.build(name)
    feeds = M.example_inputs(model, seed=1)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    return model, feeds, ref, output_bounds(model, feeds)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", CASES)
def test_op_case_matches_onnxruntime(name, arch):
    model, feeds, ref, bounds = reference(name)
    compiled = compile_model(model, arch)
    got = compiled.run(feeds)
    assert set(got) == set(ref)
    for out, expected in ref.items():
        assert got[out].shape == expected.shape
        err = float(np.max(np.abs(got[out] - expected)))
        assert err <= bounds[out], f"{name} on {arch}: {out} max error {err:.4f} > bound {bounds[out]:.4f}"
    if name in HOST_BY_DESIGN:
        assert compiled.summary.host_nodes, "expected a host segment"
    if name.startswith(("ops/conv", "ops/maxpool", "ops/avgpool", "ops/batchnorm", "ops/relu", "ops/clip", "ops/concat",
                        "ops/split", "ops/pad_edge", "ops/pad_reflect", "ops/resize", "ops/upsample", "ops/flatten",
                        "ops/transpose", "ops/reshape", "ops/squeeze", "ops/add", "ops/sub", "ops/mul", "ops/gemm_c", "ops/matmul",
                        "ops/pad", "ops/prelu", "ops/leakyrelu", "ops/globalavgpool", "ops/identity", "ops/constant", "ops/dropout",
                        "ops/depth_to_space", "ops/sigmoid", "ops/tanh", "cnn/")):
        assert not compiled.summary.host_nodes, f"{name} should run wholly on the accelerator"


def _opset_cases():
    for name in CASES:
        spec = M.MODELS[name]
        for opset in sorted({spec.min_opset, spec.max_opset}):
            yield name, opset


@pytest.mark.parametrize("name,opset", list(_opset_cases()))
def test_op_case_at_oldest_and_newest_opset(name, opset):
    """The same op written as opset 9/10 models and as opset 21 models write it."""
    model = M.build(name, opset=opset)
    feeds = M.example_inputs(model, seed=1)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    bounds = output_bounds(model, feeds)
    got = compile_model(model, "ultra96v2").run(feeds)
    for out, expected in ref.items():
        err = float(np.max(np.abs(got[out] - expected)))
        assert err <= bounds[out], f"{name} opset {opset}: {out} max error {err:.4f} > bound {bounds[out]:.4f}"


def test_partitioned_run_counts_saturations_per_input():
    """A model split between accelerator and host reports which batch items saturated."""
    from systolix.runtime import SaturationWarning
    from systolix.runtime.partitioned import PartitionedModel

    model, feeds, ref, _ = reference("host/softsign")
    compiled = compile_model(model, "pynqz1")
    assert isinstance(compiled, PartitionedModel)
    x = feeds["x"]
    scale = 100.0 / float(np.max(np.abs(x)))  # inputs stay in range, the first conv's sums do not
    batch = {"x": np.stack([x, x * scale])}
    with pytest.warns(SaturationWarning, match="1 of 2 inputs"):
        outputs, saturated = compiled.run_counting(batch, batch=True)
    assert saturated.shape == (2,) and saturated[0] == 0 and saturated[1] > 0
    assert np.max(np.abs(outputs["y"][0] - ref["y"])) <= reference("host/softsign")[3]["y"]
