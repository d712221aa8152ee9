"""Tensil's speech-commands program on its input: class 3, and the emulator against an
independent plain-NumPy interpreter written here.

``NumpyTCU`` implements ``../shared/notes/tensil-formats.md`` ("Execution semantics" and
"Numbers") directly, one Python step per instruction, vectorised over the batch and the vectors
of each instruction. It imports nothing from ``systolix.emulator`` or ``systolix.runtime``: only
the instruction decoder and the file readers of the foundation, which the ResNet-20 conformance
tests check against real hardware.
"""

from __future__ import annotations

import numpy as np
import pytest

from systolix.artifacts import TModel, read_tdata, read_vectors_csv
from systolix.isa import SIMD, DataMove, InstructionLayout, LoadLUT, LoadWeights, MatMul, NoOp, decode_program
from tests.conftest import SPEECH

MODEL = SPEECH / "speech_commands_onnx_speech_robot.tmodel"
INPUT = SPEECH / "speech_commands_input_1x8.csv"


class NumpyTCU:
    """A plain NumPy Tensor Compute Unit for fixed-point architectures."""

    def __init__(self, arch, batch: int, dram0_vectors: int, dram1_vectors: int):
        n = arch.array_size
        dt = arch.data_type
        self.n, self.bp, self.one = n, dt.binary_point, 1 << dt.binary_point
        self.lo, self.hi = -(1 << (dt.width - 1)), (1 << (dt.width - 1)) - 1
        self.local = np.zeros((batch, arch.local_depth, n), np.int64)
        self.acc = np.zeros((batch, arch.accumulator_depth, n), np.int64)
        self.dram0 = np.zeros((batch, dram0_vectors, n), np.int64)
        self.dram1 = np.zeros((batch, dram1_vectors, n), np.int64)
        self.weights = np.zeros((batch, n + 1, n), np.int64)
        self.regs = np.zeros((batch, max(arch.simd_registers_depth, 1), n), np.int64)
        self.saturations = 0

    def to_fixed(self, floats: np.ndarray) -> np.ndarray:
        """Round half up (Java's Math.round on the float32 value), then saturate."""
        scaled = np.asarray(floats, np.float32).astype(np.float64) * self.one
        return np.clip(np.floor(scaled + 0.5), self.lo, self.hi).astype(np.int64)

    def rne(self, p: np.ndarray) -> np.ndarray:
        q, r = np.divmod(p, 1 << self.bp)
        half = 1 << (self.bp - 1)
        return q + ((r > half) | ((r == half) & (q % 2 == 1)))

    def sat(self, v: np.ndarray) -> np.ndarray:
        clipped = np.clip(v, self.lo, self.hi)
        self.saturations += int(np.count_nonzero(clipped != v))
        return clipped

    @staticmethod
    def span(address: int, stride: int, count: int) -> np.ndarray:
        return address + stride * np.arange(count)

    def run(self, program) -> None:
        memory = {0: self.dram0, 1: self.dram0, 2: self.dram1, 3: self.dram1, 12: self.acc, 13: self.acc, 15: self.acc}
        for i in range(len(program)):
            ins = program.instruction(i)
            if isinstance(ins, NoOp):
                continue
            if isinstance(ins, MatMul):
                rows = self.span(ins.local_address, ins.local_stride, ins.count)
                dst = self.span(ins.acc_address, ins.acc_stride, ins.count)
                x = np.zeros((self.local.shape[0], ins.count, self.n), np.int64) if ins.zeroes else self.local[:, rows]
                products = self.rne(x[:, :, :, None] * self.weights[:, None, 1:, :])  # [b, v, row, lane]
                bias = self.weights[:, None, 0, :]
                prefix = np.cumsum(products, axis=2) + bias[:, :, None, :]
                if prefix.min() >= self.lo and prefix.max() <= self.hi:
                    y = prefix[:, :, -1, :]  # no partial sum leaves the range: order does not matter
                else:
                    y = np.broadcast_to(bias, x.shape).copy()
                    for k in range(self.n):
                        y = self.sat(y + products[:, :, k, :])
                self.acc[:, dst] = self.sat(self.acc[:, dst] + y) if ins.accumulate else y
            elif isinstance(ins, LoadWeights):
                # Vectors go in last address first, each pushing the rows down by one.
                for k in range(ins.count - 1, -1, -1):
                    self.weights[:, 1:] = self.weights[:, :-1].copy()
                    self.weights[:, 0] = 0 if ins.zeroes else self.local[:, ins.local_address + k * ins.local_stride]
            elif isinstance(ins, DataMove):
                near = self.span(ins.local_address, ins.local_stride, ins.count)
                far = self.span(ins.address, ins.stride, ins.count)
                other = memory[int(ins.flow)]
                if int(ins.flow) in (0, 2, 12):
                    self.local[:, near] = other[:, far]
                elif int(ins.flow) == 15:
                    other[:, far] = self.sat(other[:, far] + self.local[:, near])
                else:
                    other[:, far] = self.local[:, near]
            elif isinstance(ins, SIMD):
                self.simd(ins)
            elif isinstance(ins, LoadLUT):
                raise AssertionError(f"LoadLUT at #{i}")
            # Configure: no effect on the data

    def simd(self, ins) -> None:
        one = self.one
        inp = self.acc[:, ins.read_address].copy() if ins.read else np.zeros_like(self.acc[:, 0])
        left = inp if ins.left == 0 else self.regs[:, ins.left - 1].copy()
        right = inp if ins.right == 0 else self.regs[:, ins.right - 1].copy()
        op = int(ins.op)
        if op == 0:
            out = inp
        elif op == 1:
            out = np.zeros_like(inp)
        elif op == 2:
            out = left
        elif op == 3:
            out = np.where(left == 0, one, 0)
        elif op == 4:
            out = np.where((left != 0) & (right != 0), one, 0)
        elif op == 5:
            out = np.where((left != 0) | (right != 0), one, 0)
        elif op in (6, 7, 8, 9, 10, 11):
            raw = {6: left + one, 7: left - one, 8: left + right, 9: left - right,
                   10: self.rne(left * right), 11: np.abs(left)}[op]
            out = self.sat(raw)
        elif op == 12:
            out = np.where(left > right, one, 0)
        elif op == 13:
            out = np.where(left >= right, one, 0)
        elif op == 14:
            out = np.minimum(left, right)
        else:
            out = np.maximum(left, right)
        if ins.dest and op != 0:
            self.regs[:, ins.dest - 1] = out
        if ins.write:
            target = ins.write_address
            self.acc[:, target] = self.sat(self.acc[:, target] + out) if ins.accumulate else out


@pytest.fixture(scope="module")
def speech():
    manifest = TModel.load(MODEL)
    arch = manifest.arch
    program = decode_program((SPEECH / manifest.prog.file_name).read_bytes(), InstructionLayout.of(arch), "speech")
    consts = read_tdata(SPEECH / manifest.consts[0].file_name, arch.data_type, arch.array_size)
    vectors = read_vectors_csv(INPUT, arch.array_size)
    return manifest, program, consts, vectors


@pytest.fixture(scope="module")
def reference_run(speech):
    manifest, program, consts, vectors = speech
    (out,) = manifest.outputs
    (inp,) = manifest.inputs
    tcu = NumpyTCU(manifest.arch, 1, dram0_vectors=max(inp.base + inp.size, out.base + out.size) + 4096,
                   dram1_vectors=consts.shape[0])
    tcu.dram1[0, : manifest.consts[0].size] = consts[: manifest.consts[0].size]
    tcu.dram0[0, inp.base : inp.base + inp.size] = tcu.to_fixed(vectors)
    tcu.run(program)
    return tcu


def test_speech_program_predicts_class_3_and_matches_the_numpy_interpreter(speech, reference_run):
    import systolix

    manifest, program, _, vectors = speech
    run = systolix.load(MODEL).run_detailed({"input_1": vectors})
    raw = run.raw_outputs["dense_1"][0]  # [2 vectors, 8 lanes] = 12 classes and 4 padding lanes
    logits = raw.reshape(-1)[:12]
    assert int(logits.argmax()) == 3

    (out,) = manifest.outputs
    expected = reference_run.dram0[0, out.base : out.base + out.size]
    assert raw.tolist() == expected.tolist()
    assert np.array_equal(run.outputs["dense_1"] * 256, expected.astype(np.float32))
    # The whole on-chip state agrees too, not only the 16 output values.
    emulator = run.extra["emulator"]
    for name in ("local", "acc"):
        ours = getattr(emulator, name)[0]
        theirs = getattr(reference_run, name)[0]
        assert np.array_equal(ours, theirs[: ours.shape[0]]), name
        assert not theirs[ours.shape[0]:].any(), name
    assert np.array_equal(emulator.weights[0], reference_run.weights[0])
    assert run.result.saturation_total == reference_run.saturations
