"""The Tensor Compute Unit in plain NumPy: the readable specification of the emulator.

``ReferenceTCU`` implements ``../shared/notes/tensil-formats.md`` ("Execution semantics" and
"Numbers") directly, one Python step per instruction, vectorised only over the batch and the
vectors one instruction touches. It shares nothing with the numba emulator (``machine``,
``kernels``) but the instruction decoder, so the tests hold the emulator to it bit for bit
(``tests/unit/test_emulator_reference.py`` on random programs, the speech test on Tensil's own
program); it is 100 times slower.

Fixed point only: values are raw two's complement integers of the data type's width with
``bp`` fractional bits. A product ``x * w`` is rounded to ``bp`` bits half to even; every add
saturates to the type's range (counted in ``saturations``); a float converted to fixed point
rounds half up, as Java's ``Math.round`` does in Tensil's tools.

On an architecture with the Tandem vector unit, its instructions run in ``tandem.TandemUnit``
(plain NumPy as well, the unit's definition), on these same memories.
"""

from __future__ import annotations

import numpy as np

from systolix.isa import SIMD, DataFlow, DataMove, LoadLUT, LoadWeights, MatMul, SimdOp

# The memory on the far side of local memory for each data flow, and which way the data goes.
TO_LOCAL = {DataFlow.DRAM0_TO_LOCAL, DataFlow.DRAM1_TO_LOCAL, DataFlow.ACC_TO_LOCAL}
FAR = {DataFlow.DRAM0_TO_LOCAL: "dram0", DataFlow.LOCAL_TO_DRAM0: "dram0", DataFlow.DRAM1_TO_LOCAL: "dram1",
       DataFlow.LOCAL_TO_DRAM1: "dram1", DataFlow.ACC_TO_LOCAL: "acc", DataFlow.LOCAL_TO_ACC: "acc",
       DataFlow.LOCAL_TO_ACC_ACCUMULATE: "acc"}


class ReferenceTCU:
    """A TCU for a fixed-point architecture, with ``batch`` independent copies of its state.

    Memories ``local``, ``acc``, ``dram0``, ``dram1`` are ``[batch, vectors, lanes]`` raw
    integers; ``weights`` is the array's ``[batch, N + 1, N]`` (row 0 the bias); ``regs`` the
    SIMD registers (register k is operand k, operand 0 the vector read).
    """

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
        self.tandem = None
        if getattr(arch, "tandem", None) is not None:
            from systolix.emulator.tandem import TandemUnit

            self.tandem = TandemUnit(arch, batch)

    # --- numbers ---------------------------------------------------------------------------
    def to_fixed(self, floats: np.ndarray) -> np.ndarray:
        """Round half up (Java's Math.round on the float32 value), then saturate."""
        scaled = np.asarray(floats, np.float32).astype(np.float64) * self.one
        return np.clip(np.floor(scaled + 0.5), self.lo, self.hi).astype(np.int64)

    def rne(self, p: np.ndarray) -> np.ndarray:
        """A product of two raw values back to ``bp`` fractional bits, half to even."""
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

    # --- instructions ----------------------------------------------------------------------
    def run(self, program) -> None:
        """Execute a ``DecodedProgram`` (every batch item at once)."""
        from systolix.isa.tandem import is_tandem

        i = 0
        while i < len(program):
            if is_tandem(int(program.opcode[i])):
                if self.tandem is None:
                    raise ValueError(f"instruction #{i} is a Tandem instruction, but the architecture has no Tandem unit")
                i = self.tandem.step(program, i, {"acc": self.acc, "local": self.local})
                continue
            ins = program.instruction(i)
            i += 1
            if isinstance(ins, MatMul):
                self.matmul(ins)
            elif isinstance(ins, LoadWeights):
                self.load_weights(ins)
            elif isinstance(ins, DataMove):
                self.data_move(ins)
            elif isinstance(ins, SIMD):
                self.simd(ins)
            elif isinstance(ins, LoadLUT):
                raise NotImplementedError(f"LoadLUT at #{i - 1}: no hardware implements it")
            # NoOp and Configure: no effect on the data

    def matmul(self, ins: MatMul) -> None:
        """Each local vector (or zeros) through the array: ``y = bias + sum_k rne(x_k * w_k)``,
        summed in row order; written to (or added into) the accumulators."""
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

    def load_weights(self, ins: LoadWeights) -> None:
        """Vectors go in last address first, each pushing the rows down by one."""
        for k in range(ins.count - 1, -1, -1):
            self.weights[:, 1:] = self.weights[:, :-1].copy()
            self.weights[:, 0] = 0 if ins.zeroes else self.local[:, ins.local_address + k * ins.local_stride]

    def data_move(self, ins: DataMove) -> None:
        near = self.span(ins.local_address, ins.local_stride, ins.count)
        far_addresses = self.span(ins.address, ins.stride, ins.count)
        flow = DataFlow(int(ins.flow))
        far = getattr(self, FAR[flow])
        if flow in TO_LOCAL:
            self.local[:, near] = far[:, far_addresses]
        elif flow == DataFlow.LOCAL_TO_ACC_ACCUMULATE:
            far[:, far_addresses] = self.sat(far[:, far_addresses] + self.local[:, near])
        else:
            far[:, far_addresses] = self.local[:, near]

    def simd(self, ins: SIMD) -> None:
        """``op(left, right)`` on the vector read (operand 0) and the registers; the result to a
        register (``dest`` > 0, not for NoOp) and/or written (or added) to the accumulators."""
        one = self.one
        inp = self.acc[:, ins.read_address].copy() if ins.read else np.zeros_like(self.acc[:, 0])
        left = inp if ins.left == 0 else self.regs[:, ins.left - 1].copy()
        right = inp if ins.right == 0 else self.regs[:, ins.right - 1].copy()
        op = SimdOp(int(ins.op))
        if op == SimdOp.NOOP:
            out = inp
        elif op == SimdOp.ZERO:
            out = np.zeros_like(inp)
        elif op == SimdOp.MOVE:
            out = left
        elif op == SimdOp.NOT:
            out = np.where(left == 0, one, 0)
        elif op == SimdOp.AND:
            out = np.where((left != 0) & (right != 0), one, 0)
        elif op == SimdOp.OR:
            out = np.where((left != 0) | (right != 0), one, 0)
        elif op in (SimdOp.INCREMENT, SimdOp.DECREMENT, SimdOp.ADD, SimdOp.SUBTRACT, SimdOp.MULTIPLY, SimdOp.ABS):
            raw = {SimdOp.INCREMENT: lambda: left + one, SimdOp.DECREMENT: lambda: left - one, SimdOp.ADD: lambda: left + right,
                   SimdOp.SUBTRACT: lambda: left - right, SimdOp.MULTIPLY: lambda: self.rne(left * right),
                   SimdOp.ABS: lambda: np.abs(left)}[op]()
            out = self.sat(raw)
        elif op == SimdOp.GREATER_THAN:
            out = np.where(left > right, one, 0)
        elif op == SimdOp.GREATER_THAN_EQUAL:
            out = np.where(left >= right, one, 0)
        elif op == SimdOp.MIN:
            out = np.minimum(left, right)
        else:
            out = np.maximum(left, right)
        if ins.dest and op != SimdOp.NOOP:
            self.regs[:, ins.dest - 1] = out
        if ins.write:
            target = ins.write_address
            self.acc[:, target] = self.sat(self.acc[:, target] + out) if ins.accumulate else out
