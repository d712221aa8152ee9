"""The lowering and HIR passes on their own: every model's high-level IR, run in float by
``systolix.ir.evaluate``, against onnxruntime (no fixed point, no scheduling). Calibration reads
its ranges from this evaluation, so it has to be the model's function."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import systolix.models as M
from systolix.compiler import compile_model
from systolix.ir.evaluate import run_reference
from tests.onnx_builders import ir_of

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

# Every model the accelerator runs whole (gemm_transa runs on the host); ResNet-50 is slow to build
# (the classic zoo's models have host nodes: tests/e2e/test_classic_zoo.py; the transformers run whole
# only with the Tandem unit: tests/e2e/test_transformers.py).
CASES = [n for n in M.names() if not n.startswith(("host/", "bad/")) and n not in ("ops/gemm_transa", "resnet50v2")
         and M.MODELS[n].family not in ("classic", "transformer")]


@pytest.mark.parametrize("name", CASES)
def test_ir_in_float_matches_onnxruntime(name):
    model = M.build(name)
    feeds = M.example_inputs(model, seed=1)
    unfused = ir_of(model, until="lower")
    hir = ir_of(model)
    got = run_reference(hir, feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert set(got) == set(ref)
    for out, expected in ref.items():
        scale = float(np.max(np.abs(expected))) + 1e-6
        assert float(np.max(np.abs(got[out] - expected))) <= 1e-5 * scale, out
    # Folding, fusion and dead-layer elimination keep the function too.
    for out, value in run_reference(unfused, feeds).items():
        np.testing.assert_allclose(got[out], value, rtol=1e-5, atol=1e-5 * (float(np.max(np.abs(value))) + 1e-6))


@pytest.mark.parametrize("name", ["host/squeeze_excite", "host/softmax"])
def test_calibration_reaches_segments_after_the_host(name):
    """An accelerator segment that starts after a host segment is calibrated on the values
    onnxruntime gives its inputs."""
    model = M.build(name)
    cal = [M.example_inputs(model, seed=100 + k) for k in range(4)]
    compiled = compile_model(model, "pynqz1", calibration=cal)
    assert compiled.summary.host_nodes and compiled.summary.calibration_samples == 4
    feeds = M.example_inputs(model, seed=1)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = compiled.run(feeds)
    for out, expected in ref.items():
        assert float(np.max(np.abs(got[out] - expected))) < 0.05
