"""Planning and emission: the constant image, the memory map, each layer's stages and
partitions, the LIR emitted from the plan, and roll-up (LIR before and after)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.arch import ARCHITECTURES
from systolix.codegen.rollup import roll_up_instructions
from systolix.compiler import compile_model
from systolix.backend import bind_memories
from systolix.ir import same
from systolix.ir.lir import ACCUMULATORS as A
from systolix.ir.lir import CONSTS as C
from systolix.ir.lir import DRAM0 as D0
from systolix.ir.lir import DRAM1 as D1
from systolix.ir.lir import LOCAL as L
from systolix.ir.lir import VARS as V
from systolix.ir.lir import ZEROES as Z
from systolix.ir.lir import LirProgram, LoadWeights, MatMul, Move
from systolix.planning.errors import SchedulingError
from tests.onnx_builders import conv_bn_relu, ir_of, make_model

N = 8


def test_roll_up_merges_continuing_runs_only():
    before = [
        MatMul(L + 10, A + 0, 1), MatMul(L + 11, A + 1, 1), MatMul(L + 12, A + 2, 2),    # 1 + 1 + 2 consecutive vectors
        MatMul(L + 20, A + 8, 1, accumulate=True),                                       # other flags: kept apart
        Move(L + 0, D0 + 100, 4), Move(L + 4, D0 + 104, 4),
        Move(L + 8, D0 + 200, 1), Move(L + 10, D0 + 203, 1),                            # stride 3: no
        LoadWeights(L + 0, 8), LoadWeights(Z, 1),
        MatMul(L + 0, A + 0, 1), MatMul(L + 2, A + 1, 1), MatMul(L + 4, A + 2, 1),       # local stride 2 discovered
    ]
    after = roll_up_instructions(before, max_count=1 << 13, max_stride0=128, max_stride1=128)
    assert after == [
        MatMul(L + 10, A + 0, 4),
        MatMul(L + 20, A + 8, 1, accumulate=True),
        Move(L + 0, D0 + 100, 8),
        Move(L + 8, D0 + 200, 1), Move(L + 10, D0 + 203, 1),
        LoadWeights(L + 0, 8), LoadWeights(Z, 1),
        MatMul(L + 0, A + 0, 3, local_stride=2),
    ]
    pair = [MatMul(L + 0, A + 0, 4), MatMul(L + 4, A + 4, 4)]
    assert roll_up_instructions(pair, max_count=6, max_stride0=128, max_stride1=128) == pair


def test_binding_puts_vars_in_dram0_and_consts_where_the_strategy_keeps_them():
    def program(instructions, consts_local=False, bound=False):
        return LirProgram("m", instructions, np.zeros((4, N), np.int64), [], [], [], 0, 0, 0, consts_local, "s", bound)

    before = [Move(V + 8, L + 0, 4), Move(C + 2, L + 4, 2), LoadWeights(L + 4, 2), Move(L + 0, A + 3, 1, accumulate=True)]
    assert same(bind_memories(program(before)),
                program([Move(D0 + 8, L + 0, 4), Move(D1 + 2, L + 4, 2), LoadWeights(L + 4, 2), Move(L + 0, A + 3, 1, accumulate=True)],
                        bound=True))
    # local-consts: the image sits in local memory from address 0.
    assert same(bind_memories(program([LoadWeights(C + 3, 8), Move(C + 1, A + 3, 1)], consts_local=True)),
                program([LoadWeights(L + 3, 8), Move(L + 1, A + 3, 1)], consts_local=True, bound=True))


def test_the_constant_image_holds_the_rounded_weights_block_by_block():
    rng = np.random.default_rng(4)
    w = rng.normal(0, 0.5, (10, 3, 1, 1)).astype(np.float32)
    b = rng.normal(0, 0.5, 10).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])], [("x", [1, 3, 2, 2])], [("y", None)], {"w": w, "b": b})
    plan = ir_of(m, until="place constants", estimate_gains=False, pack_inputs=False)  # the plain weights and layout
    q = lambda a: np.clip(np.floor(np.asarray(a, np.float64) * 256 + 0.5), -32768, 32767)  # noqa: E731
    # Output group 0: bias vector then 8 rows (input lanes) of output lanes 0..7; group 1 likewise.
    expect = []
    for go in range(2):
        lanes = slice(go * 8, go * 8 + 8)
        bias = np.zeros(8)
        bias[: len(b[lanes])] = q(b[lanes])
        rows = np.zeros((8, 8))
        rows[:3, : len(b[lanes])] = q(w[lanes, :, 0, 0]).T
        expect += [bias[None], rows]
    np.testing.assert_array_equal(plan.constants.vectors, np.concatenate(expect))
    assert plan.constants.layers[0].vectors == 18 and plan.constants.layers[0].data.addresses == [(0, [1]), (9, [10])]


def test_pooling_taps_share_one_weight_block_loaded_once():
    # A 4x4 GlobalAveragePool is a diagonal conv with 16 taps, all the same block (2^-shift on
    # the diagonal): stored once in the image and loaded into the array once; the 16 MatMuls
    # reuse it (the array keeps its weights until the next LoadWeights). The first is loaded with
    # the bias row (one load of bias and block, stored next to each other) and writes the tile;
    # the block is loaded again without it for the 15 that add.
    m = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", [1, 8, 4, 4])], [("y", None)], {})
    lir = ir_of(m, until="roll up", estimate_gains=False)  # the plain weights
    shift = 2  # floor(log2(16)) - 2: the running sum stays in range
    # zero bias, one block, then the two SIMD multipliers (x 4/16 * 2^2, then x 2^-2)
    assert lir.consts.shape[0] == 1 + N + 2
    np.testing.assert_array_equal(lir.consts[0], np.zeros(N))
    np.testing.assert_array_equal(lir.consts[1:1 + N], np.diag(np.full(N, 256 >> shift)))
    np.testing.assert_array_equal(lir.consts[1 + N:], [np.full(N, 256), np.full(N, 64)])
    loads = [i for i in lir.instructions if isinstance(i, LoadWeights) and i.local != Z]
    assert [(i.local, i.count) for i in loads] == [(loads[0].local, N + 1), (loads[0].local + 1, N)]
    matmuls = [i for i in lir.instructions if isinstance(i, MatMul)]
    assert len(matmuls) == 16 and not matmuls[0].accumulate and all(i.accumulate for i in matmuls[1:])


def test_activations_share_dram0_once_dead():
    rng = np.random.default_rng(5)
    inits = {f"w{i}": rng.normal(size=(8, 8, 1, 1)).astype(np.float32) for i in range(4)}
    nodes = [helper.make_node("Conv", [f"t{i}", f"w{i}"], [f"t{i + 1}"], kernel_shape=[1, 1]) for i in range(4)]
    m = make_model(nodes, [("t0", [1, 8, 16, 16])], [("t4", None)], inits)
    plan = ir_of(m, until="allocate memory")
    # Five 256-vector tensors; at most three are alive at once (input, one in flight, output kept).
    assert plan.memory.dram0_vectors <= 3 * 256
    bases = [plan.memory.place(layer.output).base for layer in plan.hir.layers]
    assert len(set(bases)) < len(bases)
    assert all(p.memory == "dram0" for p in plan.memory.places.values())


def test_local_vars_keep_intermediate_tensors_on_chip():
    m, _ = conv_bn_relu()
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["s"]), helper.make_node("MaxPool", ["s"], ["y"], kernel_shape=[2, 2])]
    plan = ir_of(make_model(nodes, [("x", [1, 8, 4, 4])], [("y", None)]), until="allocate memory", strategy="local-vars")
    inside = plan.hir.layers[0].output
    assert plan.memory.place(inside).memory == "local" and plan.memory.region0 == inside.vectors
    assert plan.memory.place(plan.hir.outputs["y"]).memory == "dram0"


def test_a_conv_plan_has_its_stages_partitions_and_buffers():
    rng = np.random.default_rng(8)
    w = rng.normal(size=(24, 16, 3, 3)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], [("x", [1, 16, 32, 32])],
                   [("y", None)], {"w": w})
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"accumulator_depth": 256})
    (plan,) = ir_of(m, arch, until="tile layers", pipeline=False).layers
    # 3 output groups of 32-pixel rows: 256 accumulators hold 8 rows of one group (2 rows of
    # all three would load every weight block 16 times instead of 4: the cost model takes the
    # most vectors per weight tile); a 3x3 kernel reads a row more on each side.
    assert [s.outputs for s in plan.stages] == [(r, r + 8) for r in range(0, 32, 8)]
    assert [s.inputs for s in plan.stages] == [(max(0, r - 1), min(32, r + 9)) for r in range(0, 32, 8)]
    assert plan.partitions == [(0, 1), (1, 2), (2, 3)] and plan.weights == "resident"
    assert [(b.name, b.size) for b in plan.local] == [("weights", 3 * (1 + 9 * 2 * 8)), ("input band", 10 * 32 * 2), ("staging", 8 * 32)]
    names = [b.name for b in plan.local]
    assert names == ["weights", "input band", "staging"] and plan.local_peak == plan.local[-1].end
    assert plan.lock_halves(arch.local_depth) == {"weights": "0", "input band": "0", "staging": "0"}


def test_a_pipelined_conv_plan_puts_one_context_in_each_lock_half():
    """Tuned for the rtl TCU (whose decoder overlaps DRAM moves with the array's work), the
    layer of the test above double-buffers: a copy of the weights, a band and a staging area in
    each half of local memory, so the next stage's band loads while the array works on the
    current one."""
    rng = np.random.default_rng(8)
    w = rng.normal(size=(24, 16, 3, 3)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], [("x", [1, 16, 32, 32])],
                   [("y", None)], {"w": w})
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"accumulator_depth": 256})
    (plan,) = ir_of(m, arch, until="tile layers", tune="rtl").layers
    assert "pipelined" in plan.loop_order and plan.weights.startswith("resident")
    assert [s.outputs for s in plan.stages] == [(r, r + 8) for r in range(0, 32, 8)]
    halves = plan.lock_halves(arch.local_depth)
    assert halves == {f"{b} {k}": str(k) for k in (0, 1) for b in ("weights", "input band", "staging")}
    sizes = {b.name: b.size for b in plan.local}
    assert sizes["weights 0"] == sizes["weights 1"] == 3 * (1 + 9 * 2 * 8) and sizes["input band 1"] == 10 * 32 * 2


def test_each_tune_gives_the_program_faster_on_the_tcu_it_prices():
    """``tune``: Tensil's decoder runs DRAM moves and the array's work one after another, so its
    tune (the default) keeps single-buffered plans, whose tiles hold more; the rtl TCU overlaps
    them, so its tune double-buffers. Each program is the faster one on its own TCU's timing model
    (the layer of the two tests above, on three architectures)."""
    from systolix.compiler import choice_board
    from systolix.perf.simulator import simulate

    rng = np.random.default_rng(8)
    w = rng.normal(0, 0.1, size=(24, 16, 3, 3)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], [("x", [1, 16, 32, 32])],
                   [("y", None)], {"w": w})
    for arch in (ARCHITECTURES["pynqz1"].model_copy(update={"accumulator_depth": 256}), ARCHITECTURES["pynqz1"],
                 ARCHITECTURES["ultra96v2"]):
        tensil, rtl = compile_model(m, arch, host=False), compile_model(m, arch, host=False, tune="rtl")
        assert tensil.summary.tune == "tensil" and rtl.summary.tune == "rtl"
        on_tensil, on_rtl = choice_board(arch, "tensil"), choice_board(arch, "rtl")
        assert on_tensil.timing == "tensil" and on_rtl.timing == "rtl" and on_rtl.architecture == arch
        assert simulate(tensil.program, on_tensil).cycles < simulate(rtl.program, on_tensil).cycles
        assert simulate(rtl.program, on_rtl).cycles < simulate(tensil.program, on_rtl).cycles


def test_a_layer_too_big_for_local_memory_names_itself():
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"local_depth": 64, "accumulator_depth": 64})
    rng = np.random.default_rng(6)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="wide", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                   [("x", [1, 16, 8, 40])], [("y", None)], {"w": rng.normal(size=(8, 16, 3, 3)).astype(np.float32)})
    with pytest.raises(SchedulingError, match="layer 'wide' needs .* vectors of local memory for one output row"):
        ir_of(m, arch, until="tile layers")


def test_constants_that_do_not_fit_dram1():
    arch = ARCHITECTURES["pynqz1"].model_copy(update={"dram1_depth": 16})
    m, _ = conv_bn_relu()
    with pytest.raises(SchedulingError, match=r"layer 'conv' \(node conv, bn, relu\): its constants need \d+ vectors of DRAM1 "
                                              r"but the architecture has 16; even one group of 8 output channels needs more"):
        compile_model(m, arch)
    with pytest.raises(SchedulingError, match=r"constants need \d+ vectors of DRAM1 but the architecture has 16 .*--no-split"):
        compile_model(m, arch, split=False)


def test_dram0_falls_back_to_largest_first_where_first_fit_leaves_only_fragments():
    # Lifetimes (layer steps, inclusive) A 0..3, B 0..0, C 0..3, D 1..3; sizes 1, 2, 1, 3 vectors.
    # First fit in program order puts A at 0, B at 1, C at 3; B dies and leaves [1, 3) and [4, 6),
    # so D (3 vectors) finds no span in a DRAM0 of 6 although only 5 vectors are ever live at once.
    # Largest first: D at 0, B at 0 (never live with D), A at 3, C at 4.
    from types import SimpleNamespace

    from systolix.ir.hir import Activation
    from systolix.planning.allocators import allocate_dram0

    a, b, c, d = (Activation(name, size, 1, 1, 1) for name, size in (("A", 1), ("B", 2), ("C", 1), ("D", 3)))

    def layer(reads=(), writes=()):
        return SimpleNamespace(reads=lambda: list(reads), writes=lambda: list(writes))

    hir = SimpleNamespace(inputs={}, outputs={}, layers=[layer(writes=[a, b, c]), layer(writes=[d]), layer(), layer(reads=[a, c, d])])
    places: dict = {}
    top = allocate_dram0(hir, 6, places)
    spans = {t.name: (places[t].base, places[t].base + t.vectors) for t in (a, b, c, d)}
    assert top == 5 and spans == {"D": (0, 3), "B": (0, 2), "A": (3, 4), "C": (4, 5)}
    lifetimes = {"A": (0, 3), "B": (0, 0), "C": (0, 3), "D": (1, 3)}
    for x in spans:
        for y in spans:
            live_together = lifetimes[x][0] <= lifetimes[y][1] and lifetimes[y][0] <= lifetimes[x][1]
            if x < y and live_together:
                assert spans[x][1] <= spans[y][0] or spans[y][1] <= spans[x][0], (x, y)
    # Where even the tightest plan does not fit, the error is first fit's, naming the tensor.
    with pytest.raises(SchedulingError, match="activation 'D' needs 3 vectors of DRAM0 but only fragments are left"):
        allocate_dram0(hir, 4, {})
    # A program first fit places keeps first fit's addresses (every compiled program's files as before).
    places = {}
    assert allocate_dram0(hir, 7, places) == 7 and places[d].base == 4
