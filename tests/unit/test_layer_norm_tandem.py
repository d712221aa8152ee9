"""LayerNormalization on the Tandem vector unit (``ultra96v2_tandem``): the unit's program alone
against NumPy's float LayerNorm of the same FP16BP8 input, and compiled models against onnxruntime.

Error bound on each output ``gamma u + beta`` (``u = xc / sqrt(var + eps)``, ``r = 1/sqrt(var + eps)``),
from the program's arithmetic (``systolix.codegen.tandem_layer_norm``), all in the wide type
FP32BP16 (steps of ``2^-16``, roundings of ``2^-17``):

- the mean: the sum of ``x 2^-s`` is exact (``2^s >= D``, ``s <= 8``), one Div rounds: ``e_mu <= 2^-17``;
  ``xc`` inherits it, ``u`` moves by ``r e_mu``;
- the variance, computed again on ``xs = xc 2^-k`` (``m = (var + eps) 4^-k``, ``k`` from a first,
  coarse variance: ``m`` near [1, 4), a factor 4 either way when that one is off by a step): the
  shift rounds each ``xs`` (``2^-17``, moving its square by ``2 |xs| 2^-17``, ``|xs| <= 2 sqrt(m)``...),
  each square rounds (``2^-17``), the Div rounds, eps on its grid: at most ``7 2^-17 / m`` relatively
  (``m`` the smallest it can be, a quarter of ``(var + eps) 4^-floor(log4(var + eps'))``); ``r`` moves by half that;
- ``1/sqrt(m)``: Newton converged, a few steps of ``r`` in (1/2, 1]: ``2^-13`` relatively;
- ``u``: the shifted ``xs`` (``2^-17`` times ``r``) and the product (``2^-17``); gamma and beta as
  ``hi + lo 2^-8``: ``2^-17`` each, and four roundings of the scale-and-shift;
- the output's rounding to FP16BP8: half an LSB, ``2^-9``.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from systolix.arch import ARCHITECTURES
from systolix.cli import main
from systolix.codegen.tandem_layer_norm import (
    RSQRT_COEFFS, RSQRT_START_ERROR, interim_vectors, layer_norm_program, range_exponents, rsqrt_newton_steps, split_constant)
from systolix.compiler import compile_model
from systolix.emulator import Emulator
from systolix.isa import InstructionLayout, encode_program
from systolix.lowering import NO_IMPLEMENTATION

pytestmark = [pytest.mark.needs_emulator]

TANDEM = "ultra96v2_tandem"
ARCH = ARCHITECTURES[TANDEM]
N = ARCH.array_size
W = 2.0 ** -17  # half a step of the wide type
HALF_LSB = 0.5 / 256


def layer_norm(x, gamma, beta, eps):
    """NumPy's float LayerNorm over the last axis; also ``u`` and ``1/sqrt(var + eps)``."""
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    u = (x - mean) * r
    return u * gamma + beta, u, r, var


def bound(x, gamma, beta, eps):
    """The module docstring's bound, per element of ``x`` ([T, D], on the FP16BP8 grid)."""
    _, u, r, var = layer_norm(x, gamma, beta, eps)
    eps_wide = max(1, round(eps * 65536)) / 65536 if eps > 0 else 0.0
    m = (var + eps) / 4.0 ** np.floor(np.log(var + eps_wide) / np.log(4)) / 4
    rel = 7 * W / m / 2 + 2.0 ** -13
    return HALF_LSB + np.abs(gamma) * (np.abs(u) * rel + r * W + 3 * W) + np.abs(u) * W + 6 * W


def run_program(x, gamma, beta, eps):
    """``x`` ([T, D] FP16BP8 values) through the unit's program on the emulator; the result [T, D]."""
    T, D = x.shape
    G = -(-D // N)
    hi_lo = [*split_constant(gamma, 8), *split_constant(beta, 8)]
    acc = np.zeros((1, G * T + 4 * G + 1, N), np.int64)
    padded = np.zeros((T, G * N))
    padded[:, :D] = x
    acc[0, : G * T] = np.round(padded * 256).astype(np.int64).reshape(T, G, N).transpose(1, 0, 2).reshape(G * T, N)
    consts = G * T
    for k, part in enumerate(hi_lo):
        p = np.zeros(G * N)
        p[:D] = part
        acc[0, consts + k * G: consts + (k + 1) * G] = np.round(p * 256).astype(np.int64).reshape(G, N)
    acc[0, consts + 4 * G] = (np.arange(N) < D % N) * 256
    program = layer_norm_program(0, G, D, N, 16, 8, consts, D % N != 0, eps, T)
    emu = Emulator(ARCH)
    emu.write("acc", 0, acc)
    emu.run(encode_program(program, InstructionLayout.of(ARCH)))
    out = emu.read("acc", 0, G * T)[0].reshape(G, T, N).transpose(1, 0, 2).reshape(T, G * N)[:, :D]
    return out / 256.0


def case(T, D, scale, offset, seed, eps=1e-5):
    rng = np.random.default_rng(seed)
    x = np.round(np.clip(rng.normal(offset, scale, (T, D)), -127, 127) * 256) / 256
    gamma = rng.uniform(0.5, 1.5, D)
    beta = rng.normal(0, 0.3, D)
    return x, gamma, beta, eps


@pytest.mark.parametrize("T, D, scale, offset", [(4, 64, 1.0, 0.0), (3, 40, 0.3, 2.0), (2, 16, 20.0, -30.0), (3, 5, 0.05, 1.0),
                                                 (2, 100, 3.0, 0.5)])
def test_the_units_program_is_within_the_derived_bound_of_numpy(T, D, scale, offset):
    x, gamma, beta, eps = case(T, D, scale, offset, seed=D)
    got = run_program(x, gamma, beta, eps)
    exact = layer_norm(x, gamma, beta, eps)[0]
    assert np.all(np.abs(got - exact) <= bound(x, gamma, beta, eps)), np.abs(got - exact).max() * 256


@given(scale=st.floats(0.02, 40.0), offset=st.floats(-20.0, 20.0), seed=st.integers(0, 2**16), D=st.sampled_from([16, 24, 64]))
@settings(max_examples=12, deadline=None)
def test_any_token_scale_and_offset_stays_within_the_bound(scale, offset, seed, D):
    x, gamma, beta, eps = case(2, D, scale, offset, seed)
    got = run_program(x, gamma, beta, eps)
    exact = layer_norm(x, gamma, beta, eps)[0]
    assert np.all(np.abs(got - exact) <= bound(x, gamma, beta, eps))


@pytest.mark.parametrize("scale, eps", [(0.004, 1e-12), (0.004, 1e-5), (0.02, 0.0), (60.0, 1e-12)])
def test_tiny_and_huge_variances_and_bert_or_no_epsilon(scale, eps):
    """Tokens a few LSB apart (variance near 1e-5, far below the first pass's resolution) with
    BERT's eps 1e-12 or none, and tokens spread over the whole FP16BP8 range."""
    x, gamma, beta, _ = case(3, 64, scale, 1.0, seed=int(scale * 1000))
    got = run_program(x, gamma, beta, eps)
    exact = layer_norm(x, gamma, beta, eps)[0]
    assert np.all(np.abs(got - exact) <= bound(x, gamma, beta, eps)), np.abs(got - exact).max() * 256


def test_rsqrt_range_reduction_covers_the_wide_type_and_newton_converges():
    lowest, highest = range_exponents(16, 8)
    assert (4.0 ** lowest, 4.0 ** (highest + 1)) == (2.0 ** -16, 2.0 ** 16)  # every positive FP32BP16 value
    e = RSQRT_START_ERROR
    assert e < 0.05
    for _ in range(rsqrt_newton_steps() - 1):
        e = 1.5 * e * e
    assert e < 2.0 ** -20
    assert interim_vectors(4, 16, 8) == 4 + 10 + 15
    m = np.linspace(1.0, 4.0, 1000)
    assert np.abs(np.polyval(RSQRT_COEFFS, m) * np.sqrt(m) - 1).max() <= RSQRT_START_ERROR + 1e-6


def ln_model(T, Din, D, eps=1e-5, seed=0, axis=-1):
    """x [1, T, Din] -> MatMul + Add -> LayerNormalization over the last axis."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in (
        (rng.normal(0, 1 / np.sqrt(Din), (Din, D)), "w"), (rng.normal(0, 0.3, D), "b"), (rng.uniform(0.5, 1.5, D), "g"),
        (rng.normal(0, 0.2, D), "be"))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Add", ["y", "b"], ["z"], name="add"),
             helper.make_node("LayerNormalization", ["z", "g", "be"], ["o"], name="ln", axis=axis, epsilon=eps)]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, T, Din])],
                          [helper.make_tensor_value_info("o", onnx.TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def ort_run(model, x, output=None):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(output, {"x": x})[0]


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("T, Din, D", [(6, 24, 64), (4, 16, 40)])
def test_a_linear_layer_then_layer_norm_matches_onnxruntime(T, Din, D):
    """Against onnxruntime: the unit's bound on the accelerator's own LayerNorm input ``z'``, plus
    LayerNorm's sensitivity to ``z' - z`` (``dz`` at most): its Jacobian ``gamma/sigma (I - 1 1^T/D
    - u u^T/D)`` moves output ``i`` by at most ``|gamma_i| dz / sigma (2 + |u_i|)`` (``mean |u| <= 1``), 10% for second order."""
    model = ln_model(T, Din, D, seed=D)
    compiled = compile_model(model, TANDEM, host=False)
    assert compiled.summary.host_nodes == []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    with_z = compile_model(probe, TANDEM, host=False)
    inits = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    x = np.random.default_rng(T).normal(0, 1, (1, T, Din)).astype(np.float32)
    out = with_z.run({"x": x})
    got, z = np.asarray(out["o"], np.float64)[0], np.asarray(out["z"], np.float64)[0]
    assert np.array_equal(got, np.asarray(compiled.run({"x": x})["o"])[0])
    # The unit alone, on the accelerator's own z.
    own = layer_norm(z, inits["g"], inits["be"], 1e-5)[0]
    assert np.all(np.abs(got - own) <= bound(z, inits["g"], inits["be"], 1e-5))
    # Against onnxruntime.
    z_ref = ort_run(probe, x, ["z"])[0].astype(np.float64)
    ref = ort_run(model, x)[0]
    dz = np.abs(z - z_ref).max(-1, keepdims=True)
    _, u, r, _ = layer_norm(z_ref, inits["g"], inits["be"], 1e-5)
    sensitivity = 1.1 * np.abs(inits["g"]) * dz * r * (2 + np.abs(u))
    assert np.all(np.abs(got - ref) <= bound(z, inits["g"], inits["be"], 1e-5) + sensitivity)


def test_without_the_unit_layer_norm_stays_on_the_host():
    compiled = compile_model(ln_model(4, 16, 32), "ultra96v2")
    assert compiled.summary.host_nodes == ["ln"]
    assert compiled.summary.host_reasons == {"ln": NO_IMPLEMENTATION}


@pytest.mark.needs_onnxruntime
def test_layer_norm_over_tokens_and_channels_goes_to_the_host_with_the_reason():
    model = ln_model(4, 16, 32, axis=1)  # over T and D together
    compiled = compile_model(model, TANDEM)
    assert compiled.summary.host_nodes == ["ln"]
    assert "normalises over the channel axis" in compiled.summary.host_reasons["ln"]
    x = np.random.default_rng(0).normal(0, 1, (1, 4, 16)).astype(np.float32)
    assert np.abs(np.asarray(compiled.run({"x": x})["o"]) - ort_run(model, x)).max() < 0.05


def test_estimate_counts_the_units_clocks(tmp_path, capsys):
    """The unit's busy clocks in ``systolix estimate``: every instruction of the program times the
    iterations of the loops around it (counted here from the program itself), a Div 32."""
    T, D = 3, 40
    compiled = compile_model(ln_model(T, 16, D), TANDEM, host=False)
    tmodel = compiled.save(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["estimate", str(tmodel), "--board", "ultra96-v2", "--json"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    busy = json.loads(out.out)["units"]["tandem"]["busy_cycles"]
    program = layer_norm_program(0, 3, D, N, 16, 8, 100, True, 1e-5, T)
    assert busy == clocks(program)


def clocks(program) -> int:
    """Clocks of a Tandem program by the timing table of docs/tandem.md, walking its loops."""
    from systolix.isa.tandem import TAlu, TAluOp, TLoop, TSync

    total, i = 0, 0

    def walk(lo, hi, times):
        nonlocal total
        i = lo
        while i < hi:
            ins = program[i]
            total += 0 if isinstance(ins, TSync) else times * (32 if isinstance(ins, TAlu) and ins.op == TAluOp.DIV else 1)
            if isinstance(ins, TLoop):
                walk(i + 1, i + 1 + ins.body, times * ins.iterations)
                i += 1 + ins.body
            else:
                i += 1

    walk(0, len(program), 1)
    return total
