"""The N x N weight-stationary systolic array, with its bias row and input/output skew.

Processing element ``(k, j)`` holds weight row ``k + 1``, column ``j``; the bias row (row 0) sits
above the columns and starts every partial sum. A vector's lane ``k`` enters row ``k`` ``k``
clocks late and moves right one column a clock; partial sums move down one row a clock, so
column ``j`` adds bias, then rows 1..N in order, each product rounded and each add saturating,
exactly the emulator's order. The columns' results leave skewed and are realigned, so that a
vector presented at ``x`` comes out at ``y`` ``2N - 1`` clocks later (``OUTPUT_DELAY``).

``shift`` moves every weight row down by one and puts ``shift_data`` into the bias row: the
``LoadWeights`` of the notes ("the lowest address ends in row 0"). Weights may change only when
no vector is still inside the array: the compute lane waits for that (``RtlConfig.weight_drain``).
"""

from __future__ import annotations

from amaranth.hdl import Elaboratable, Module, Signal

from systolix.rtl.arith import Arith
from systolix.rtl.config import RtlConfig


def output_delay(n: int) -> int:
    return 2 * n - 1


class SystolicArray(Elaboratable):
    def __init__(self, cfg: RtlConfig):
        self.cfg = cfg
        n, w = cfg.n, cfg.scalar_bits
        self.x = Signal(n * w)
        self.y = Signal(n * w)
        self.shift = Signal()
        self.shift_data = Signal(n * w)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, w = cfg.n, cfg.scalar_bits
        arith = Arith.of(cfg.data_type)

        def lane(vector, k):
            return vector[k * w : (k + 1) * w]

        # Data registers have no reset: their values never steer control, and logic that reads the
        # reset input is re-evaluated by Verilator whenever any input changes.
        bias = [Signal(w, name=f"bias_{j}", reset_less=True) for j in range(n)]
        weight = [[Signal(w, name=f"w_{k}_{j}", reset_less=True) for j in range(n)] for k in range(n)]
        with m.If(self.shift):
            for j in range(n):
                m.d.sync += bias[j].eq(lane(self.shift_data, j))
                m.d.sync += weight[0][j].eq(bias[j])
                for k in range(1, n):
                    m.d.sync += weight[k][j].eq(weight[k - 1][j])

        # Input skew: lane k reaches row k after k registers.
        row_input = []
        for k in range(n):
            value = lane(self.x, k)
            for stage in range(k):
                r = Signal(w, name=f"skew_{k}_{stage}", reset_less=True)
                m.d.sync += r.eq(value)
                value = r
            row_input.append(value)

        psum_above = list(bias)
        for k in range(n):
            x_in = row_input[k]
            psum_row = []
            for j in range(n):
                psum = Signal(w, name=f"psum_{k}_{j}", reset_less=True)
                m.d.sync += psum.eq(arith.mac(m, psum_above[j], x_in, weight[k][j], f"mac_{k}_{j}"))
                psum_row.append(psum)
                if j < n - 1:  # the input moves on to the next column
                    x_next = Signal(w, name=f"x_{k}_{j}", reset_less=True)
                    m.d.sync += x_next.eq(x_in)
                    x_in = x_next
            psum_above = psum_row

        # Output deskew: column j leaves the last row at 2N-1-(N-1-j) clocks; delay it to 2N-1.
        for j in range(n):
            value = psum_above[j]
            for stage in range(n - 1 - j):
                r = Signal(w, name=f"deskew_{j}_{stage}", reset_less=True)
                m.d.sync += r.eq(value)
                value = r
            m.d.comb += lane(self.y, j).eq(value)
        return m
