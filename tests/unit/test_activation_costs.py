"""The SIMD instructions each approximated activation costs per output vector (the README's
approximation-error table), and that they touch only the tile, its scratch tiles and the
layer's constants."""

from __future__ import annotations

import pytest

from systolix.codegen.conv import Tile
from systolix.lowering.ops.gelu import GeluOp
from systolix.lowering.ops.hardswish import HardSwishOp
from systolix.lowering.ops.mish import MishOp
from systolix.lowering.ops.sigmoid import SigmoidOp
from systolix.lowering.ops.silu import SiluOp
from systolix.lowering.ops.softplus import SoftplusOp
from systolix.lowering.ops.tanh import TanhOp


class Recorder:
    def __init__(self):
        self.calls = []

    def simd(self, op, left=0, right=0, dest=0, read=None, write=None, accumulate=False):
        self.calls.append((op, read, write))


@pytest.mark.parametrize("op,per_vector", [(HardSwishOp(), 8), (SigmoidOp(), 33), (SiluOp(), 37), (TanhOp(), 39), (GeluOp(), 46),
                                           (SoftplusOp(), 43), (MishOp(), 58)])
def test_instructions_per_vector(op, per_vector):
    n = 6
    t = Tile(Recorder(), None, 8, 0, 1, 0, 2, 3, stage=0, acc_const=1000, acc_scratch=0, acc_bcast=0, consts_local=False)
    t.acc_scratch = t.acc + 100  # the second tile (and the third at + n), beside the first
    t.e.calls.clear()
    op.emit(t, 0)
    assert len(t.e.calls) == n * per_vector
    allowed = set(t.vectors()) | {t.acc_scratch + k for k in range(n * (op.tile_copies - 1))}
    allowed |= set(range(1000, 1100))
    for _, read, write in t.e.calls:
        assert read is None or read in allowed
        assert write is None or write in allowed
