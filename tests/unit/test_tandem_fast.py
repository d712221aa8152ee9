"""The Tandem unit's numba fast path (``emulator/tandem_fast.py``) against its NumPy definition
(``TandemUnit.step``): random programs (every opcode and op, nested loops, iterators with
strides, extreme values that saturate, division by zero, shifts past the width) on random
states must leave every memory, the interim buffer, the iterator tables and the saturation
counts identical."""

from __future__ import annotations

import numpy as np
import pytest

from systolix.arch import ARCHITECTURES
from systolix.emulator.tandem import TandemUnit
from systolix.isa import InstructionLayout, decode_program, encode_program
from systolix.isa.tandem import (
    Namespace,
    TAlu,
    TAluOp,
    TCalc,
    TCalcOp,
    TCast,
    TCmp,
    TCmpOp,
    TImm,
    TIterBase,
    TIterStride,
    TLoop,
    TOperand,
    TPermute,
    TPermuteOp,
    TSync,
    TSyncKind,
    UNARY_ALU,
    ZERO_OPERAND,
)

ARCH = ARCHITECTURES["ultra96v2_tandem"]
LAYOUT = InstructionLayout.of(ARCH)
N = ARCH.array_size
DEPTH = 64  # acc and local vectors in the test state; addresses stay below 8 + 2*3*2 + N


def _operand(rng, writes: bool = False) -> TOperand:
    namespaces = [Namespace.ACC, Namespace.LOCAL, Namespace.INTERIM] + ([] if writes else [Namespace.IMM])
    ns = namespaces[rng.integers(len(namespaces))]
    return TOperand(ns, int(rng.integers(4)))


def _compute(rng):
    kind = rng.choice(5, p=[0.5, 0.125, 0.125, 0.125, 0.125])  # the ALU has the most ops
    if kind == 0:
        op = TAluOp(int(rng.integers(len(TAluOp))))
        src2 = ZERO_OPERAND if op in UNARY_ALU else _operand(rng)
        return TAlu(op, _operand(rng, True), _operand(rng), src2)
    if kind == 1:
        return TCalc(TCalcOp(int(rng.integers(len(TCalcOp)))), _operand(rng, True), _operand(rng))
    if kind == 2:
        return TCmp(TCmpOp(int(rng.integers(len(TCmpOp)))), _operand(rng, True), _operand(rng), _operand(rng))
    if kind == 3:
        return TPermute(TPermuteOp(int(rng.integers(len(TPermuteOp)))), _operand(rng, True), _operand(rng))
    width = int(rng.integers(2, 33))
    return TCast(_operand(rng, True), _operand(rng), width, int(rng.integers(0, min(width, 16) + 1)))


def _wide(rng) -> int:
    special = [-(1 << 31), (1 << 31) - 1, 0, 1 << 16, -(1 << 16), 1, -1, 40 << 16, -(40 << 16)]
    if rng.random() < 0.3:
        return int(rng.choice(special))
    return int(rng.integers(-(1 << 20), 1 << 20)) if rng.random() < 0.7 else int(rng.integers(-(1 << 31), 1 << 31))


def random_program(rng) -> list:
    program = []
    for ns in (Namespace.ACC, Namespace.LOCAL, Namespace.INTERIM):
        for k in range(4):
            program.append(TIterBase(ns, k, int(rng.integers(0, 9))))
            for level in range(2):
                program.append(TIterStride(ns, k, level, int(rng.integers(0, 3))))
    for slot in range(4):
        program.append(TImm(slot, _wide(rng)))
    for _ in range(int(rng.integers(3, 10))):
        shape = rng.integers(4)
        if shape == 0:
            program.append(_compute(rng))
        elif shape == 1:
            program.append(TSync(TSyncKind.TO_UNIT))
            program.append(_compute(rng))
        else:  # a loop of level 0, maybe with a loop of level 1 inside
            body = [_compute(rng) for _ in range(int(rng.integers(1, 3)))]
            if shape == 3:
                inner = [_compute(rng) for _ in range(int(rng.integers(1, 3)))]
                body = body + [TLoop(1, int(rng.integers(1, 4)), len(inner))] + inner + [_compute(rng)]
            program += [TLoop(0, int(rng.integers(1, 4)), len(body))] + body
    return program


def _state(rng, batch: int) -> dict:
    lo, hi = ARCH.data_type.min_int, ARCH.data_type.max_int
    acc = rng.integers(lo, hi + 1, size=(batch, DEPTH, N))
    acc[:, ::7] = rng.choice([lo, hi, 0], size=acc[:, ::7].shape)
    return {"acc": acc.astype(np.int64), "local": rng.integers(lo, hi + 1, size=(batch, DEPTH, N)).astype(np.int64)}


@pytest.mark.needs_emulator
def test_random_programs_give_the_definitions_results_bit_for_bit():
    rng = np.random.default_rng(2026)
    batch = 2
    ran = 0
    for trial in range(150):
        program = decode_program(encode_program(random_program(rng), LAYOUT), LAYOUT)
        mems = _state(rng, batch)
        # Wide values with fraction bits (products that round), a few huge ones (that saturate).
        interim = rng.integers(-(1 << 20), 1 << 20, size=(batch, ARCH.tandem.interim_depth, N))
        interim[:, ::5] = rng.integers(-(1 << 31), 1 << 31, size=interim[:, ::5].shape)
        ref, fast = TandemUnit(ARCH, batch), TandemUnit(ARCH, batch)
        ref.interim[:], fast.interim[:] = interim, interim
        ref_mems = {k: v.copy() for k, v in mems.items()}
        fast_mems = {k: v.copy() for k, v in mems.items()}
        i = 0
        while i < len(program):
            i = ref.step(program, i, ref_mems)
        j = 0
        while j < len(program):  # stretches as the emulator runs them, and single instructions
            j = fast.run_stretch(program, j, len(program), fast_mems, whole=bool(trial % 2))
        for name in ("acc", "local"):
            assert np.array_equal(ref_mems[name], fast_mems[name]), (trial, name)
        assert np.array_equal(ref.interim, fast.interim), trial
        assert np.array_equal(ref.saturations, fast.saturations), trial
        for field in ("base", "stride", "imm", "index"):
            assert np.array_equal(getattr(ref, field), getattr(fast, field)), (trial, field)
        ran += int(ref.saturations.sum() > 0)
    assert ran > 20  # saturation paths were exercised
