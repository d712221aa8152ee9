"""Models whose constants exceed DRAM1: cut into accelerator programs run one after another,
each with its own constants (the driver points DRAM1's offset register at each program's buffer). The cut changes where activations wait between layers, not a single value."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import systolix
import systolix.models as M
from systolix.arch import get_architecture
from systolix.compiler import compile_model
from systolix.planning.errors import SchedulingError
from tests.error_model import output_bounds

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

SMALL_DRAM1 = 32768  # ResNet-20 v2 on 8x8: 72,470 vectors of constants, its largest layer 18,448


@pytest.fixture(scope="module")
def resnet20():
    return M.build("resnet20v2")


@pytest.fixture(scope="module")
def feeds(resnet20):
    items = [M.example_inputs(resnet20, seed=k) for k in range(4)]
    return {name: np.stack([it[name] for it in items]) for name in items[0]}, items


# Plain weights: with estimated gains a program after a cut would estimate from its own inputs,
# so its gains (not its function) would differ from the whole program's. And every pixel kept,
# no residual convs merged: a program after a cut reads a tensor crossing it whole, so which
# layers those rewrites reach (and how the merged sums round) would differ too.
SAME_LAYERS = {"estimate_gains": False, "merge_residual_convs": False, "subsample_strided_reads": False}


@pytest.fixture(scope="module")
def whole(resnet20):
    return compile_model(resnet20, "pynqz1", **SAME_LAYERS)


def test_split_programs_fit_and_compute_what_one_program_does(resnet20, whole, feeds, tmp_path):
    batch, items = feeds
    small = get_architecture("pynqz1").model_copy(update={"dram1_depth": SMALL_DRAM1})
    split = compile_model(resnet20, small, **SAME_LAYERS)
    assert [s.kind for s in split.summary.segments] == ["accelerator"] * 3
    assert split.summary.constant_cuts == 2 and whole.summary.constant_cuts == 0
    for seg in split.summary.segments:
        assert seg.lir.consts.shape[0] <= SMALL_DRAM1
    assert split.summary.consts_vectors == whole.summary.consts_vectors
    assert split.summary.consts_peak <= SMALL_DRAM1 < whole.summary.consts_peak
    # Every node runs in exactly one program, in the model's order.
    nodes = [i for seg in split.summary.segments for i in seg.nodes]
    assert nodes == sorted(nodes) == list(range(len(nodes)))

    ours = next(iter(split.run(batch).values()))
    one = next(iter(whole.run(batch).values()))
    np.testing.assert_array_equal(ours, one)
    sess = ort.InferenceSession(resnet20.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, item in enumerate(items):
        ref = sess.run(None, item)[0]
        bound = next(iter(output_bounds(resnet20, item).values()))
        assert float(np.max(np.abs(ours[k] - ref))) <= bound

    # Saved and loaded: the same programs and the same answers.
    top = split.save(tmp_path)
    loaded = systolix.load(top)
    np.testing.assert_array_equal(next(iter(loaded.run(batch).values())), ours)


def test_one_layer_past_dram1_is_split_by_output_channels(resnet20, whole, feeds):
    # stage3_unit1_b_conv's constants alone (18,448 vectors) exceed 16,384, as do those of the
    # convolutions like it: their 64 output channels become two slices of 32 in programs of
    # their own (tests/e2e/test_layer_split.py).
    tiny = get_architecture("pynqz1").model_copy(update={"dram1_depth": 16384})
    split = compile_model(resnet20, tiny, **SAME_LAYERS)
    assert "stage3_unit1_b_conv" in split.summary.split_layers and set(split.summary.split_layers.values()) == {2}
    assert all(seg.lir.consts.shape[0] <= 16384 for seg in split.summary.segments)
    batch, _ = feeds
    np.testing.assert_array_equal(next(iter(split.run(batch).values())), next(iter(whole.run(batch).values())))


def test_no_split_keeps_the_error(resnet20):
    small = get_architecture("pynqz1").model_copy(update={"dram1_depth": SMALL_DRAM1})
    with pytest.raises(SchedulingError, match=r"constants need 71630 vectors of DRAM1 but the architecture has 32768 "
                                              r"\(the largest share: layer '.*', 18448\); splitting .* off"):
        compile_model(resnet20, small, split=False, estimate_gains=False)  # the plain weights' count
