"""The scheduler proper: layers on memory objects to instructions on tagged addresses (LIR).

Each layer is cut into *stages* (a band of output rows whose input rows fit local memory) and
each stage into *partitions* (a range of output channel groups whose results fit the
accumulators). Within a partition the order is weight-stationary: every nonzero N x N weight
block is loaded into the array once and the whole band streams through it. Local memory during
a layer: ``[constants (local-consts) | activations (local-vars) | weights (resident or one chunk)
| input band | staging]``; the accumulators: ``[partition's outputs ... | the layer's SIMD
constants]``. Tensil's four strategies: ``local-isolated`` (constants in DRAM1, activations in
DRAM0), ``local-consts`` (the driver puts the ``.tdata`` in local memory: weights are used in
place), ``local-vars`` (activations between layers stay in local memory, no DRAM0 round trip)
and ``local-vars-and-consts``. Every strategy computes the same numbers.

Instructions are emitted one output row at a time (``roll_up`` merges the runs afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolix.arch import Architecture
from systolix.errors import SystolixError
from systolix.isa import SIMD, DataFlow, DataMove, InstructionLayout, LoadWeights, MatMul, SimdOp
from systolix.numerics import to_fixed
from systolix.scheduler.hir import Activation, ConvLayer, HirProgram, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer

STRATEGIES = ("local-isolated", "local-vars", "local-consts", "local-vars-and-consts")


class SchedulingError(SystolixError):
    """A layer does not fit the architecture's memories."""


class ConstantsDoNotFit(SchedulingError):
    """The program's constants need more of DRAM1 (or local memory) than the architecture has.

    ``layers`` lists each layer's name, ONNX node names and vectors of constants, in program
    order: enough for ``systolix.compiler`` to cut the graph into programs that fit.
    """

    def __init__(self, message: str, needed: int, depth: int, where: str, layers: list[tuple[str, list[str], int]],
                 context: str = ""):
        super().__init__(message)
        self.needed, self.depth, self.where, self.layers = needed, depth, where, layers
        self.context = context  # what the message starts with (the strategy, where it matters)


@dataclass
class LayerRecord:
    """One entry of the layer map, plus what the compile summary reports."""

    name: str
    ops: list[str]
    first: int
    end: int
    macs: int
    stages: int = 0
    partitions: int = 0
    local_peak: int = 0
    acc_peak: int = 0


@dataclass
class LirProgram:
    """Instructions, the constants image, and where everything lives."""

    instructions: list
    consts: np.ndarray  # raw vectors [n, N]
    layers: list[LayerRecord]
    dram0_vectors: int
    local_peak: int
    acc_peak: int
    load_consts_to_local: bool
    strategy: str
    notes: list[str] = field(default_factory=list)


class ConstPool:
    """Constants (raw vectors) appended in order; offsets in vectors."""

    def __init__(self, N: int):
        self.N = N
        self.chunks: list[np.ndarray] = []
        self.size = 0
        self.owner = -1  # the layer (index) whose constants are being added
        self.by_owner: dict[int, int] = {}

    def add(self, vectors: np.ndarray) -> int:
        v = np.asarray(vectors, np.int64).reshape(-1, self.N)
        offset = self.size
        self.chunks.append(v)
        self.size += v.shape[0]
        self.by_owner[self.owner] = self.by_owner.get(self.owner, 0) + v.shape[0]
        return offset

    def image(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros((0, self.N), np.int64)
        return np.concatenate(self.chunks, axis=0)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class Emitter:
    """Emits instructions with the architecture's limits (sizes, strides) applied."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.N = arch.array_size
        self.layout = InstructionLayout.of(arch)
        self.max_count = 1 << self.layout.operand2_bits_used
        self.max_lw_count = 1 << self.layout.operand1_address_bits
        self.max_stride0 = 1 << (arch.stride0_depth - 1)
        self.max_stride1 = 1 << (arch.stride1_depth - 1)
        self.out: list = []

    def _ok0(self, s: int) -> bool:
        return _pow2(s) and s <= self.max_stride0

    def _ok1(self, s: int) -> bool:
        return _pow2(s) and s <= self.max_stride1

    def move(self, flow: DataFlow, local: int, far: int, count: int, local_stride: int = 1, far_stride: int = 1) -> None:
        """Move ``count`` vectors; strides that cannot be encoded become one move per vector."""
        if count <= 0:
            return
        if count > 1 and not (self._ok0(local_stride) and self._ok1(far_stride)):
            for k in range(count):
                self.out.append(DataMove(flow, local + k * local_stride, far + k * far_stride, 0))
            return
        if count == 1:
            local_stride = far_stride = 1
        k = 0
        while k < count:
            n = min(self.max_count, count - k)
            self.out.append(DataMove(flow, local + k * local_stride, far + k * far_stride, n - 1, local_stride, far_stride))
            k += n

    def move_rows(self, flow: DataFlow, local: int, far: int, rows: int, width: int, row_stride: int, pixel_stride: int) -> None:
        """``rows`` rows of ``width`` pixels between consecutive local vectors and DRAM (``row_stride``
        and ``pixel_stride`` apart there): one move when the rows are contiguous, else one a row."""
        if pixel_stride == 1 and row_stride == width:
            self.move(flow, local, far, rows * width)
            return
        for r in range(rows):
            self.move(flow, local + r * width, far + r * row_stride, width, 1, pixel_stride)

    def load_rows(self, local: int, far: int, rows: int, width: int, row_stride: int, pixel_stride: int) -> None:
        """``move_rows`` from DRAM0 into local memory."""
        self.move_rows(DataFlow.DRAM0_TO_LOCAL, local, far, rows, width, row_stride, pixel_stride)

    def save_rows(self, local: int, far: int, rows: int, width: int, row_stride: int, pixel_stride: int) -> None:
        """``move_rows`` from local memory out to DRAM0."""
        self.move_rows(DataFlow.LOCAL_TO_DRAM0, local, far, rows, width, row_stride, pixel_stride)

    def matmul(self, local: int, acc: int, count: int, local_stride: int = 1, accumulate: bool = True, zeroes: bool = False) -> None:
        if count <= 0:
            return
        if count > 1 and not self._ok0(local_stride):
            for k in range(count):
                self.out.append(MatMul(local + k * local_stride, acc + k, 0, 1, 1, accumulate, zeroes))
            return
        if count == 1:
            local_stride = 1
        k = 0
        while k < count:
            n = min(self.max_count, count - k)
            self.out.append(MatMul(local + k * local_stride, acc + k, n - 1, local_stride, 1, accumulate, zeroes))
            k += n

    def load_block(self, local: int) -> None:
        """Weights rows 1..N from ``local[0..N)``, a zero bias row."""
        self.out.append(LoadWeights(local, self.N - 1))
        self.out.append(LoadWeights(0, 0, zeroes=True))

    def load_bias(self, local: int) -> None:
        """Zero weights, bias row from ``local``."""
        self.out.append(LoadWeights(0, self.N - 1, zeroes=True))
        self.out.append(LoadWeights(local, 0))

    def simd(self, op: SimdOp, left: int = 0, right: int = 0, dest: int = 0, read: int | None = None, write: int | None = None, accumulate: bool = False) -> None:
        self.out.append(SIMD(op, left, right, dest, write_address=write or 0, read_address=read or 0,
                             read=read is not None, write=write is not None, accumulate=accumulate))


class Scheduler:
    """Turns an ``HirProgram`` into an ``LirProgram`` for one architecture and strategy."""

    def __init__(self, arch: Architecture, strategy: str = "local-isolated", progress=None):
        if strategy not in STRATEGIES:
            raise SchedulingError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
        self.arch = arch
        self.N = arch.array_size
        self.dtype = arch.data_type
        self.e = Emitter(arch)
        self.consts = ConstPool(self.N)
        self.strategy = strategy
        self.consts_local = strategy in ("local-consts", "local-vars-and-consts")
        self.vars_local = strategy in ("local-vars", "local-vars-and-consts")
        self.const_region = 0
        self.region0 = 0  # first local address a layer may use for its own scratch
        self.progress = progress
        self.records: list[LayerRecord] = []
        self.local_peak = 0
        self.acc_peak = 0

    # --- constants --------------------------------------------------------------------
    def q(self, values) -> np.ndarray:
        return to_fixed(np.asarray(values, np.float32), self.dtype)

    def channel_vectors(self, values: np.ndarray, G: int) -> np.ndarray:
        """Per-channel values as G raw vectors (padding lanes zero)."""
        padded = np.zeros(G * self.N, np.float32)
        padded[: len(values)] = values
        return self.q(padded).reshape(G, self.N)

    # --- plan DRAM0 --------------------------------------------------------------------
    def plan_dram0(self, hir: HirProgram) -> int:
        """First-fit allocation of every activation's span, freed after its last reader."""
        roots: dict[int, Activation] = {}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        end = len(hir.layers) + 1
        for a in hir.inputs.values():
            r = a.root()[0]
            roots[id(r)] = r
            first[id(r)] = -1
            last[id(r)] = -1
        for k, layer in enumerate(hir.layers):
            for a in layer.reads():
                r = a.root()[0]
                roots.setdefault(id(r), r)
                last[id(r)] = max(last.get(id(r), -1), k)
                first.setdefault(id(r), k)
            r = layer.output.root()[0]
            roots.setdefault(id(r), r)
            first[id(r)] = min(first.get(id(r), k), k)
            last[id(r)] = max(last.get(id(r), k), k)
        for a in hir.outputs.values():
            last[id(a.root()[0])] = end
        free: list[list[int]] = [[0, self.arch.dram0_depth]]
        used_top = 0

        def alloc(size: int, what: str) -> int:
            nonlocal used_top
            for span in free:
                if span[1] - span[0] >= size:
                    base = span[0]
                    span[0] += size
                    used_top = max(used_top, base + size)
                    return base
            raise SchedulingError(f"{what} needs {size} vectors of DRAM0 but only fragments are left (DRAM0 depth {self.arch.dram0_depth})")

        def release(base: int, size: int) -> None:
            free.append([base, base + size])
            free.sort()
            merged = [free[0]]
            for s in free[1:]:
                if s[0] <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], s[1])
                else:
                    merged.append(s)
            free[:] = [m for m in merged if m[1] > m[0]]

        order = sorted(roots, key=lambda i: (first[i], 0 if first[i] < 0 else 1))
        by_first: dict[int, list[int]] = {}
        for i in order:
            by_first.setdefault(first[i], []).append(i)
        live: list[int] = []
        for step in range(-1, len(hir.layers)):
            for i in by_first.get(step, []):
                r = roots[i]
                r.base = alloc(r.vectors, f"activation {r.name!r}")
                live.append(i)
            for i in [i for i in live if last[i] <= step and last[i] < end]:
                if step >= 0 or last[i] < 0:
                    release(roots[i].base, roots[i].vectors)
                    live.remove(i)
        return used_top

    def plan_local_vars(self, hir: HirProgram, start: int) -> int:
        """local-vars: intermediate activations live in local memory (first fit, freed after their
        last reader) while they fit in half of what is left; the rest stay in DRAM0. Model inputs
        and outputs stay in DRAM0 (the driver reads and writes them there), as do tensors that
        pure data movement layers touch. Returns the size of the local region used."""
        capacity = (self.arch.local_depth - start) // 2
        excluded = {id(a.root()[0]) for a in list(hir.inputs.values()) + list(hir.outputs.values())}
        for layer in hir.layers:
            if isinstance(layer, (RemapLayer, PixelMixLayer, ShuffleLayer)):
                excluded.update(id(a.root()[0]) for a in layer.reads() + [layer.output])
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        roots: dict[int, Activation] = {}
        for k, layer in enumerate(hir.layers):
            r = layer.output.root()[0]
            roots[id(r)] = r
            first.setdefault(id(r), k)
            last[id(r)] = max(last.get(id(r), k), k)
            for a in layer.reads():
                r = a.root()[0]
                roots[id(r)] = r
                last[id(r)] = max(last.get(id(r), k), k)
        live: list[tuple[int, int, int]] = []  # (base, size, last)
        top = 0
        for k, layer in enumerate(hir.layers):
            live = [x for x in live if x[2] >= k]
            for i in [i for i, f in first.items() if f == k and i not in excluded]:
                r = roots[i]
                size = r.vectors
                spans = sorted((b, b + n) for b, n, _ in live)
                base, cursor = None, 0
                for b, e_ in spans:
                    if b - cursor >= size:
                        base = cursor
                        break
                    cursor = max(cursor, e_)
                if base is None and capacity - cursor >= size:
                    base = cursor
                if base is None:
                    continue  # does not fit: stays in DRAM0
                r.memory, r.base = "local", start + base
                live.append((base, size, last[i]))
                top = max(top, base + size)
        return top

    # --- the program -------------------------------------------------------------------
    def run(self, hir: HirProgram) -> LirProgram:
        dram0 = self.plan_dram0(hir)
        if self.consts_local:
            # Constants go first so that their size is known before layers lay out local memory.
            self.prepare_consts(hir)
        self.region0 = self.const_region
        if self.vars_local:
            self.region0 += self.plan_local_vars(hir, self.const_region)
        for k, layer in enumerate(hir.layers):
            self.consts.owner = k
            start = len(self.e.out)
            rec = LayerRecord(layer.name, list(layer.ops), start, start, int(layer.macs))
            if isinstance(layer, ConvLayer):
                self.conv(layer, rec)
            elif isinstance(layer, MaxPoolLayer):
                self.maxpool(layer, rec)
            elif isinstance(layer, RemapLayer):
                self.remap(layer, rec)
            elif isinstance(layer, PixelMixLayer):
                self.pixelmix(layer, rec)
            elif isinstance(layer, ShuffleLayer):
                self.shuffle(layer, rec)
            rec.end = len(self.e.out)
            self.records.append(rec)
            self.local_peak = max(self.local_peak, rec.local_peak)
            self.acc_peak = max(self.acc_peak, rec.acc_peak)
            if self.progress is not None:
                self.progress(k + 1, len(hir.layers))
        image = self.consts.image()
        where = "local memory" if self.consts_local else "DRAM1"
        depth = self.arch.local_depth if self.consts_local else self.arch.dram1_depth
        if image.shape[0] > depth:
            raise self.constants_overflow(hir, "", where, depth)
        return LirProgram(self.e.out, image, self.records, dram0, self.local_peak, self.acc_peak, self.consts_local, self.strategy)

    # --- conv layers ----------------------------------------------------------------------
    def conv_consts(self, layer: ConvLayer):
        """Quantised weight blocks and bias vectors, grouped per output group."""
        N = self.N
        out = layer.output
        Go = out.G
        KH, KW = layer.kernel
        per_go: list[list[tuple[int, int, int, int, np.ndarray]]] = [[] for _ in range(Go)]
        for i, inp in enumerate(layer.inputs):
            Gi = inp.act.G
            if inp.diagonal is not None:
                # Output channel c reads input channel c: only the diagonal blocks exist.
                diag = np.zeros((Go * N, KH, KW), np.float32)
                diag[: inp.diagonal.shape[0]] = inp.diagonal
                qd = self.q(diag).reshape(Go, N, KH, KW)
                for go in range(min(Go, Gi)):
                    for kh in range(KH):
                        for kw in range(KW):
                            lanes = qd[go, :, kh, kw]
                            if lanes.any():
                                per_go[go].append((i, kh, kw, go, np.diag(lanes)))
                continue
            dense = np.zeros((Go * N, Gi * N, KH, KW), np.float32)
            dense[: out.C, : inp.act.C] = inp.weights
            qw = self.q(dense).reshape(Go, N, Gi, N, KH, KW)
            # [go, kh, kw, gi, in lane, out lane]
            blocks = qw.transpose(0, 4, 5, 2, 3, 1)
            nonzero = blocks.any(axis=(4, 5))
            for go, kh, kw, gi in zip(*np.nonzero(nonzero)):
                per_go[go].append((i, int(kh), int(kw), int(gi), blocks[go, kh, kw, gi]))
        bias = self.channel_vectors(layer.bias, Go)
        return per_go, bias

    def simd_consts(self, layer) -> tuple[list[np.ndarray], dict]:
        """The SIMD constant vectors a layer's post-ops need, and where each op finds them."""
        vectors: list[np.ndarray] = []
        where: dict = {}
        G = layer.output.G
        N = self.N
        for k, p in enumerate(getattr(layer, "post_ops", [])):
            if p.kind == "clip":
                where[k] = len(vectors)
                vectors.append(self.q(np.full(N, p.lo)))
                vectors.append(self.q(np.full(N, p.hi)))
            elif p.kind in ("slope", "mul"):
                where[k] = len(vectors)
                if np.all(p.values == p.values[0]):
                    # One value for every channel: one vector serves every channel group.
                    where[k] = (len(vectors), True)
                    vectors.append(self.q(np.full(N, p.values[0])))
                else:
                    where[k] = (len(vectors), False)
                    vectors.extend(self.channel_vectors(p.values, G))
            elif p.kind == "add_const":
                # A constant tensor, planar per channel group, added from DRAM1 (or local memory).
                C, Hc, Wc = p.values.shape
                padded = np.zeros((G * N, Hc * Wc), np.float32)
                padded[:C] = p.values.reshape(C, -1)
                vecs = self.q(padded).reshape(G, N, Hc * Wc).transpose(0, 2, 1).reshape(-1, N)
                where[k] = ("tensor", self.consts.add(vecs), Hc * Wc)
            elif p.kind == "mul_pixel":
                raw = self.q(p.values)
                distinct = np.unique(raw)
                where[k] = (len(vectors), distinct, raw)
                vectors.extend(np.full(N, v, np.int64) for v in distinct)
        return vectors, where

    def prepare_consts(self, hir: HirProgram) -> None:
        """local-consts: every layer's constants are placed first, so the local region is known."""
        self.layer_consts = {}
        for index, layer in enumerate(hir.layers):
            self.consts.owner = index
            if isinstance(layer, ConvLayer):
                per_go, bias = self.conv_consts(layer)
                offsets = self.store_conv_consts(per_go, bias)
                simd, where = self.simd_consts(layer)
                simd_off = self.consts.add(np.array(simd)) if simd else -1
                self.layer_consts[id(layer)] = (per_go, bias, offsets, simd, where, simd_off)
            elif isinstance(layer, PixelMixLayer):
                self.layer_consts[id(layer)] = self.pixelmix_consts(layer)
            elif isinstance(layer, ShuffleLayer):
                self.layer_consts[id(layer)] = self.shuffle_consts(layer)
        self.const_region = self.consts.size
        if self.const_region > self.arch.local_depth:
            raise self.constants_overflow(hir, f"strategy {self.strategy}: ", "local memory", self.arch.local_depth)

    def constants_overflow(self, hir: HirProgram, prefix: str, where: str, depth: int) -> ConstantsDoNotFit:
        """The error for constants past ``depth``, with each layer's share."""
        layers = [(layer.name, list(layer.nodes), self.consts.by_owner.get(k, 0)) for k, layer in enumerate(hir.layers)]
        name, _, most = max(layers, key=lambda entry: entry[2])
        message = (f"{prefix}the constants need {self.consts.size} vectors of {where} but the architecture has {depth} "
                   f"(the largest share: layer {name!r}, {most})")
        return ConstantsDoNotFit(message, self.consts.size, depth, where, layers, prefix)

    def store_conv_consts(self, per_go, bias) -> list[tuple[int, list[int]]]:
        """Per output group: ``[bias, block 0 rows, block 1 rows, ...]``; returns offsets."""
        offsets = []
        for go, blocks in enumerate(per_go):
            # A block equal to the one before it (every tap of an average pool) is stored once:
            # addresses stay non-decreasing, so a streamed chunk is still one contiguous range.
            parts = [bias[go][None, :]]
            addrs: list[int] = []
            for j, b in enumerate(blocks):
                if j and np.array_equal(b[4], blocks[j - 1][4]):
                    addrs.append(addrs[-1])
                else:
                    addrs.append(1 + (len(parts) - 1) * self.N)
                    parts.append(b[4])
            base = self.consts.add(np.concatenate(parts, axis=0))
            offsets.append((base, [base + a for a in addrs]))
        return offsets

    def conv(self, layer: ConvLayer, rec: LayerRecord) -> None:
        e, N, arch = self.e, self.N, self.arch
        out = layer.output
        KH, KW = layer.kernel
        sh, sw = layer.stride
        dh, dw = layer.dilation
        pt, pl, pb, pr = layer.pads
        OH, OW, Go = out.H, out.W, out.G
        H, W = layer.inputs[0].act.H, layer.inputs[0].act.W
        for inp in layer.inputs:
            if (inp.act.H, inp.act.W) != (H, W):
                raise SchedulingError(f"layer {layer.name!r}: inputs have different spatial sizes")
        if self.consts_local:
            per_go, bias, offsets, simd, where, simd_off = self.layer_consts[id(layer)]
            region0 = self.region0
        else:
            per_go, bias = self.conv_consts(layer)
            offsets = self.store_conv_consts(per_go, bias)
            simd, where = self.simd_consts(layer)
            simd_off = self.consts.add(np.array(simd)) if simd else -1
            region0 = self.region0
        n_simd = len(simd)
        # Tensor operands of SIMD ops sit in the accumulators beside the tile: a whole tile for an
        # elementwise product, one vector per channel group for a broadcast one.
        kinds = {p.kind for p in layer.post_ops}
        tile_copies = 2 if "mul_tensor" in kinds else 1
        n_bcast = Go if kinds & {"add_bcast", "mul_bcast"} else 0
        acc_avail = (arch.accumulator_depth - n_simd - n_bcast) // tile_copies
        local_avail = arch.local_depth - region0
        total_w = sum(1 + len(set(addrs)) * N for _, addrs in offsets)  # as stored: repeats once
        # A layer whose output channel c reads only input channel c (depthwise, pooling, scaling)
        # needs in local memory only the input groups of the partition it computes.
        diagonal = len(layer.inputs) == 1 and layer.inputs[0].diagonal is not None
        sum_gi = sum(inp.act.G for inp in layer.inputs)

        def rows_in(R: int) -> int:
            return min(H, (R - 1) * sh + (KH - 1) * dh + 1)

        if OW > acc_avail:
            raise SchedulingError(
                f"layer {layer.name!r} needs {OW + n_simd} vectors of accumulators for one output row of one channel group "
                f"but the architecture has {arch.accumulator_depth}")
        def local_need(R: int, ng: int) -> int:
            return rows_in(R) * W * (ng if diagonal else sum_gi) + R * OW * ng

        def search(extra: int):
            """The most output channel groups, then the most rows, that fit with ``extra`` vectors of weights."""
            for ng in range(min(Go, acc_avail // OW), 0, -1):
                for R in range(min(OH, acc_avail // (OW * ng)), 0, -1):
                    if local_need(R, ng) + extra <= local_avail:
                        return R, ng
            return 0, 0

        resident = self.consts_local
        R, ng = (0, 0) if resident else search(total_w)
        if R:
            resident = True
        else:
            R, ng = search(0 if resident else 1 + N)
        if not R:
            raise SchedulingError(
                f"layer {layer.name!r} needs {local_need(1, 1) + (0 if resident else 1 + N)} vectors of local memory for one output row "
                f"({rows_in(1)} input rows x {W} pixels x {1 if diagonal else sum_gi} channel groups, {OW} staging, {N + 1} weights) "
                f"but the architecture has {local_avail}{' after the constants' if region0 else ''}")
        # Local layout.
        w_base = region0
        if resident:
            w_size = 0 if self.consts_local else total_w
        else:
            w_size = local_avail - local_need(R, ng)
        in_base = w_base + w_size
        stage_base = in_base + rows_in(R) * W * (ng if diagonal else sum_gi)
        rec.local_peak = stage_base + R * OW * ng
        rec.acc_peak = tile_copies * R * OW * ng + n_simd + n_bcast
        acc_const = arch.accumulator_depth - n_simd
        self.acc_scratch = R * OW * ng  # the second tile (elementwise product)
        self.acc_bcast = acc_const - n_bcast
        # Where each weight block / bias sits in local memory (resident) or DRAM1 (streamed).
        if resident and not self.consts_local:
            w_first = offsets[0][0] if offsets else 0
            e.move(DataFlow.DRAM1_TO_LOCAL, w_base, w_first, total_w)
            to_local = lambda a: w_base + (a - w_first)  # noqa: E731
        elif self.consts_local:
            to_local = lambda a: a  # noqa: E731
        else:
            to_local = None
        if n_simd:
            if self.consts_local:
                e.move(DataFlow.LOCAL_TO_ACC, simd_off, acc_const, n_simd)
            else:
                # Through the (still empty) input band area, in pieces if it is small.
                room = max(1, arch.local_depth - in_base)
                for k in range(0, n_simd, room):
                    n = min(room, n_simd - k)
                    e.move(DataFlow.DRAM1_TO_LOCAL, in_base, simd_off + k, n)
                    e.move(DataFlow.LOCAL_TO_ACC, in_base, acc_const + k, n)
        # Valid output ranges per kernel row/column (padding contributes zeros: skipped).
        def valid(n_out, size, k, s, d, p0):
            lo = max(0, -(-(p0 - k * d) // s))
            hi = min(n_out, (size - 1 - k * d + p0) // s + 1)
            return lo, max(lo, hi)

        vh = [valid(OH, H, k, sh, dh, pt) for k in range(KH)]
        vw = [valid(OW, W, k, sw, dw, pl) for k in range(KW)]
        in_off = []
        o = 0
        for inp in layer.inputs:
            in_off.append(o)
            o += inp.act.G
        for oh0 in range(0, OH, R):
            oh1 = min(OH, oh0 + R)
            rows = oh1 - oh0
            ih_lo = max(0, oh0 * sh - pt)
            ih_hi = min(H, (oh1 - 1) * sh - pt + (KH - 1) * dh + 1)
            nrows = max(0, ih_hi - ih_lo)
            rec.stages += 1
            band: dict[tuple[int, int], int] = {}

            def load_band(groups, first_slot):
                """Input rows ih_lo..ih_hi of the given (input, group) pairs, one after another;
                ``band[(input, group)]`` is where row ih_lo sits in local memory."""
                for slot, (i, gi) in enumerate(groups, first_slot):
                    act = layer.inputs[i].act
                    base, gs, hs, ws = act.strides()
                    if act.root()[0].memory == "local":
                        band[(i, gi)] = base + gi * gs + ih_lo * hs  # already on chip (local-vars)
                        continue
                    lbase = in_base + slot * nrows * W
                    band[(i, gi)] = lbase
                    e.load_rows(lbase, base + gi * gs + ih_lo * hs, ih_hi - ih_lo, W, hs, ws)

            if not diagonal:
                # Input band: channel group by channel group, rows contiguous.
                load_band([(i, gi) for i, inp in enumerate(layer.inputs) for gi in range(inp.act.G)], 0)
            for go0 in range(0, Go, ng):
                go1 = min(Go, go0 + ng)
                rec.partitions += 1
                slot0 = 0
                if diagonal:
                    gi_hi = min(go1, layer.inputs[0].act.G)
                    load_band([(0, g) for g in range(go0, gi_hi)], 0)
                    slot0 = go0
                for go in range(go0, go1):
                    acc_go = (go - go0) * rows * OW
                    blocks = per_go[go]
                    bias_addr, block_addrs = offsets[go]
                    if to_local is None:
                        # Streamed: bias and as many blocks as fit, chunk by chunk.
                        per_chunk = max(1, (w_size - 1) // N)
                        chunks = [list(range(c, min(len(blocks), c + per_chunk))) for c in range(0, max(1, len(blocks)), per_chunk)]
                    else:
                        chunks = [list(range(len(blocks)))]
                    for ci, chunk in enumerate(chunks):
                        if to_local is None:
                            first = bias_addr if ci == 0 else block_addrs[chunk[0]]
                            last = (block_addrs[chunk[-1]] + N) if chunk else bias_addr + 1
                            e.move(DataFlow.DRAM1_TO_LOCAL, w_base, first, last - first)
                            loc = lambda a, first=first: w_base + (a - first)  # noqa: E731
                        else:
                            loc = to_local
                        if ci == 0:
                            e.load_bias(loc(bias_addr))
                            e.matmul(0, acc_go, rows * OW, 1, accumulate=False, zeroes=True)
                            in_array = None  # the weights now in the array: the bias block
                        for j in chunk:
                            i, kh, kw, gi, _ = blocks[j]
                            h0, h1 = vh[kh]
                            w0, w1 = vw[kw]
                            r0, r1 = max(h0, oh0), min(h1, oh1)
                            if r0 >= r1 or w0 >= w1:
                                continue
                            # The array keeps its weights until the next LoadWeights: a block equal
                            # to the one loaded last (pooling taps) is not loaded again.
                            if in_array is None or block_addrs[j] != block_addrs[in_array]:
                                e.load_block(loc(block_addrs[j]))
                                in_array = j
                            lbase = band[(i, gi)]
                            for oh in range(r0, r1):
                                ih = oh * sh + kh * dh - pt
                                iw = w0 * sw + kw * dw - pl
                                e.matmul(lbase + (ih - ih_lo) * W + iw, acc_go + (oh - oh0) * OW + w0, w1 - w0, sw)
                n_vec = (go1 - go0) * rows * OW
                self.post_ops(layer, go0, go1, oh0, rows, OW, stage_base, acc_const, where)
                # Save: accumulators to staging, staging to DRAM0 (or straight to local-vars).
                base, gs, hs, ws = out.strides()
                if out.root()[0].memory == "local":
                    for go in range(go0, go1):
                        e.move(DataFlow.ACC_TO_LOCAL, base + go * gs + oh0 * hs, (go - go0) * rows * OW, rows * OW)
                    continue
                e.move(DataFlow.ACC_TO_LOCAL, stage_base, 0, n_vec)
                for go in range(go0, go1):
                    e.save_rows(stage_base + (go - go0) * rows * OW, base + go * gs + oh0 * hs, rows, OW, hs, ws)

    def post_ops(self, layer: ConvLayer, go0: int, go1: int, oh0: int, rows: int, OW: int, stage: int, acc_const: int, where) -> None:
        e = self.e
        n_vec = (go1 - go0) * rows * OW
        for k, p in enumerate(layer.post_ops):
            if p.kind == "add" and p.tensor.root()[0].memory == "local":
                base, gs, hs, ws = p.tensor.strides()
                for go in range(go0, go1):
                    e.move(DataFlow.LOCAL_TO_ACC_ACCUMULATE, base + go * gs + oh0 * hs, (go - go0) * rows * OW, rows * OW)
            elif p.kind == "add":
                t = p.tensor
                base, gs, hs, ws = t.strides()
                for go in range(go0, go1):
                    sbase = stage + (go - go0) * rows * OW
                    e.load_rows(sbase, base + go * gs + oh0 * hs, rows, OW, hs, ws)
                e.move(DataFlow.LOCAL_TO_ACC_ACCUMULATE, stage, 0, n_vec)
            elif p.kind == "add_const":
                _, offset, P = where[k]
                if self.consts_local:
                    for go in range(go0, go1):
                        e.move(DataFlow.LOCAL_TO_ACC_ACCUMULATE, offset + go * P + oh0 * OW, (go - go0) * rows * OW, rows * OW)
                else:
                    for go in range(go0, go1):
                        e.move(DataFlow.DRAM1_TO_LOCAL, stage + (go - go0) * rows * OW, offset + go * P + oh0 * OW, rows * OW)
                    e.move(DataFlow.LOCAL_TO_ACC_ACCUMULATE, stage, 0, n_vec)
            elif p.kind in ("mul_tensor", "add_bcast", "mul_bcast"):
                t = p.tensor
                base, gs, hs, ws = t.strides()
                on_chip = t.root()[0].memory == "local"
                if p.kind == "mul_tensor":
                    for go in range(go0, go1):
                        sbase = stage + (go - go0) * rows * OW
                        if on_chip:
                            e.move(DataFlow.LOCAL_TO_ACC, base + go * gs + oh0 * hs, self.acc_scratch + (go - go0) * rows * OW, rows * OW)
                            continue
                        for r in range(rows):
                            e.move(DataFlow.DRAM0_TO_LOCAL, sbase + r * OW, base + go * gs + (oh0 + r) * hs, OW, 1, ws)
                    if not on_chip:
                        e.move(DataFlow.LOCAL_TO_ACC, stage, self.acc_scratch, n_vec)
                    for v in range(n_vec):
                        e.simd(SimdOp.MOVE, 0, 0, 1, read=self.acc_scratch + v)
                        e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=v, write=v)
                else:
                    op = SimdOp.ADD if p.kind == "add_bcast" else SimdOp.MULTIPLY
                    if on_chip:
                        e.move(DataFlow.LOCAL_TO_ACC, base + go0 * gs, self.acc_bcast, go1 - go0, gs, 1)
                    else:
                        e.move(DataFlow.DRAM0_TO_LOCAL, stage, base + go0 * gs, go1 - go0, 1, gs)
                        e.move(DataFlow.LOCAL_TO_ACC, stage, self.acc_bcast, go1 - go0)
                    for go in range(go0, go1):
                        e.simd(SimdOp.MOVE, 0, 0, 1, read=self.acc_bcast + go - go0)
                        for v in range((go - go0) * rows * OW, (go - go0 + 1) * rows * OW):
                            e.simd(op, 0, 1, 0, read=v, write=v)
            elif p.kind == "relu":
                e.simd(SimdOp.ZERO, dest=1)
                for v in range(n_vec):
                    e.simd(SimdOp.MAX, 0, 1, 0, read=v, write=v)
            elif p.kind == "clip":
                c = acc_const + where[k]
                e.simd(SimdOp.MOVE, 0, 0, 1, read=c)
                for v in range(n_vec):
                    e.simd(SimdOp.MAX, 0, 1, 0, read=v, write=v)
                e.simd(SimdOp.MOVE, 0, 0, 1, read=c + 1)
                for v in range(n_vec):
                    e.simd(SimdOp.MIN, 0, 1, 0, read=v, write=v)
            elif p.kind == "slope":
                first, uniform = where[k]
                for go in range(go0, go1):
                    c = acc_const + first + (0 if uniform else go)
                    lanes = p.values[go * self.N:(go + 1) * self.N]
                    op = SimdOp.MIN if np.all(lanes >= 1) and np.any(lanes > 1) else SimdOp.MAX
                    for v in range((go - go0) * rows * OW, (go - go0 + 1) * rows * OW):
                        e.simd(SimdOp.MOVE, 0, 0, 1, read=c)
                        e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=v)
                        e.simd(op, 0, 1, 0, read=v, write=v)
            elif p.kind == "mul":
                first, uniform = where[k]
                for go in range(go0, go1):
                    e.simd(SimdOp.MOVE, 0, 0, 1, read=acc_const + first + (0 if uniform else go))
                    for v in range((go - go0) * rows * OW, (go - go0 + 1) * rows * OW):
                        e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=v, write=v)
            elif p.kind == "mul_pixel":
                first, distinct, raw = where[k]
                band = raw[oh0:oh0 + rows].reshape(-1)
                for j, value in enumerate(distinct):
                    pix = np.flatnonzero(band == value)
                    if not len(pix):
                        continue
                    e.simd(SimdOp.MOVE, 0, 0, 1, read=acc_const + first + j)
                    for go in range(go0, go1):
                        for v in pix + (go - go0) * rows * OW:
                            e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=int(v), write=int(v))
            else:  # pragma: no cover - the lowering only makes the kinds above
                raise SchedulingError(f"layer {layer.name!r}: unknown accumulator operation {p.kind!r}")

    # --- max pooling --------------------------------------------------------------------------
    def maxpool(self, layer: MaxPoolLayer, rec: LayerRecord) -> None:
        e, arch = self.e, self.arch
        x, out = layer.input, layer.output
        KH, KW = layer.kernel
        sh, sw = layer.stride
        dh, dw = layer.dilation
        pt, pl, _, _ = layer.pads
        H, W, OH, OW, G = x.H, x.W, out.H, out.W, x.G
        region0 = self.region0

        def rows_in(R):
            return min(H, (R - 1) * sh + (KH - 1) * dh + 1)

        plan = None
        for ng in range(G, 0, -1):
            for R in range(OH, 0, -1):
                acc = ng * (rows_in(R) * W + R * OW)
                loc = ng * max(rows_in(R) * W, R * OW)
                if acc <= arch.accumulator_depth and region0 + loc <= arch.local_depth:
                    plan = (ng, R)
                    break
            if plan:
                break
        if plan is None:
            raise SchedulingError(
                f"layer {layer.name!r} needs {rows_in(1) * W + OW} vectors of accumulators and {region0 + max(rows_in(1) * W, OW)} of local memory "
                f"for one output row of one channel group; the architecture has {arch.accumulator_depth} and {arch.local_depth}")
        ng, R = plan
        stage = region0
        xb, xgs, xhs, xws = x.strides()
        ob, ogs, ohs, ows = out.strides()
        rec.local_peak = region0 + ng * max(rows_in(R) * W, R * OW)
        for oh0 in range(0, OH, R):
            oh1 = min(OH, oh0 + R)
            rows = oh1 - oh0
            ih_lo = max(0, oh0 * sh - pt)
            ih_hi = min(H, (oh1 - 1) * sh - pt + (KH - 1) * dh + 1)
            nrows = ih_hi - ih_lo
            rec.stages += 1
            for g0 in range(0, G, ng):
                g1 = min(G, g0 + ng)
                rec.partitions += 1
                n_in = (g1 - g0) * nrows * W
                out_acc = n_in
                rec.acc_peak = max(rec.acc_peak, n_in + (g1 - g0) * rows * OW)
                x_local = x.root()[0].memory == "local"
                for g in range(g0, g1):
                    lb = stage + (g - g0) * nrows * W
                    if x_local:
                        e.move(DataFlow.LOCAL_TO_ACC, xb + g * xgs + ih_lo * xhs, (g - g0) * nrows * W, nrows * W)
                        continue
                    e.load_rows(lb, xb + g * xgs + ih_lo * xhs, ih_hi - ih_lo, W, xhs, xws)
                if not x_local:
                    e.move(DataFlow.LOCAL_TO_ACC, stage, 0, n_in)
                for g in range(g0, g1):
                    gin = (g - g0) * nrows * W
                    gout = out_acc + (g - g0) * rows * OW
                    for oh in range(oh0, oh1):
                        ihs = [oh * sh + k * dh - pt for k in range(KH)]
                        ihs = [ih for ih in ihs if 0 <= ih < H]
                        for ow in range(OW):
                            iws = [ow * sw + k * dw - pl for k in range(KW)]
                            taps = [gin + (ih - ih_lo) * W + iw for ih in ihs for iw in iws if 0 <= iw < W]
                            dst = gout + (oh - oh0) * OW + ow
                            if len(taps) == 1:
                                e.simd(SimdOp.MOVE, 0, 0, 0, read=taps[0], write=dst)
                                continue
                            e.simd(SimdOp.MOVE, 0, 0, 1, read=taps[0])
                            for t in taps[1:-1]:
                                e.simd(SimdOp.MAX, 0, 1, 1, read=t)
                            e.simd(SimdOp.MAX, 0, 1, 0, read=taps[-1], write=dst)
                n_out = (g1 - g0) * rows * OW
                if out.root()[0].memory == "local":
                    for g in range(g0, g1):
                        e.move(DataFlow.ACC_TO_LOCAL, ob + g * ogs + oh0 * ohs, out_acc + (g - g0) * rows * OW, rows * OW)
                    continue
                e.move(DataFlow.ACC_TO_LOCAL, stage, out_acc, n_out)
                for g in range(g0, g1):
                    e.save_rows(stage + (g - g0) * rows * OW, ob + g * ogs + oh0 * ohs, rows, OW, ohs, ows)

    # --- pixel mixes (linear resizes) ------------------------------------------------------------
    def pixelmix_consts(self, layer: PixelMixLayer):
        """Rounded coefficients, the distinct values, and where their diagonal blocks are stored."""
        q = self.q(layer.coefficient)
        keep = q != 0
        po, pi, q = layer.out_pixel[keep], layer.in_pixel[keep], q[keep]
        order = np.lexsort((pi, po))
        po, pi, q = po[order], pi[order], q[order]
        values = np.unique(q)
        blocks = np.concatenate([np.diag(np.full(self.N, v, np.int64)) for v in values]) if len(values) else np.zeros((0, self.N), np.int64)
        offset = self.consts.add(blocks) if len(values) else 0
        return po, pi, q, values, offset

    def pixelmix(self, layer: PixelMixLayer, rec: LayerRecord) -> None:
        e, arch, N = self.e, self.arch, self.N
        x, out = layer.input, layer.output
        G = x.G
        po, pi, q, values, offset = (self.layer_consts[id(layer)] if self.consts_local else self.pixelmix_consts(layer))
        region0 = self.region0
        w_size = 0 if self.consts_local else len(values) * N
        w_base = region0
        in_base = region0 + w_size
        room = arch.local_depth - in_base
        P_out = out.P
        lo_of = np.full(P_out, np.iinfo(np.int64).max)
        hi_of = np.full(P_out, -1)
        np.minimum.at(lo_of, po, pi)
        np.maximum.at(hi_of, po, pi)
        if not self.consts_local and len(values):
            e.move(DataFlow.DRAM1_TO_LOCAL, w_base, offset, w_size)
        to_local = (lambda v: offset + v * N) if self.consts_local else (lambda v: w_base + v * N)  # noqa: E731
        value_index = {int(v): k for k, v in enumerate(values)}
        xb, xgs, _, xws = x.strides()
        ob, ogs, _, ows = out.strides()
        starts = np.searchsorted(po, np.arange(P_out + 1))
        a = 0
        while a < P_out:
            lo, hi = np.iinfo(np.int64).max, -1
            b = a
            while b < P_out:
                nlo = min(lo, lo_of[b]) if hi_of[b] >= 0 else lo
                nhi = max(hi, hi_of[b])
                n_in = (nhi - nlo + 1) if nhi >= 0 else 0
                if G * (b + 1 - a) > arch.accumulator_depth or G * n_in + G * (b + 1 - a) > room:
                    break
                lo, hi, b = nlo, nhi, b + 1
            if b == a:
                raise SchedulingError(
                    f"layer {layer.name!r} needs {w_size} vectors of local memory for its {len(values)} distinct coefficients "
                    f"plus {G * (max(0, hi_of[a] - lo_of[a]) + 2)} for one output pixel, but the architecture has {arch.local_depth - region0}")
            rec.stages += 1
            rec.partitions += 1
            n_in = (hi - lo + 1) if hi >= 0 else 0
            n_out = b - a
            stage = in_base + G * n_in
            rec.local_peak = max(rec.local_peak, stage + G * n_out)
            rec.acc_peak = max(rec.acc_peak, G * n_out)
            for g in range(G):
                e.move(DataFlow.DRAM0_TO_LOCAL, in_base + g * n_in, xb + g * xgs + lo * xws, n_in, 1, xws)
            e.out.append(LoadWeights(0, N, zeroes=True))
            e.matmul(0, 0, G * n_out, 1, accumulate=False, zeroes=True)
            s0, s1 = starts[a], starts[b]
            bpo, bpi, bq = po[s0:s1], pi[s0:s1], q[s0:s1]
            for v in np.unique(bq):
                sel = bq == v
                e.load_block(to_local(value_index[int(v)]))
                for g in range(G):
                    for o, i in zip((bpo[sel] - a + g * n_out).tolist(), (bpi[sel] - lo + in_base + g * n_in).tolist()):
                        e.out.append(MatMul(i, o, 0, 1, 1, True, False))
            e.move(DataFlow.ACC_TO_LOCAL, stage, 0, G * n_out)
            for g in range(G):
                e.move(DataFlow.LOCAL_TO_DRAM0, stage + g * n_out, ob + g * ogs + a * ows, n_out, 1, ows)
            a = b

    # --- shuffles (reshapes that move channels) ------------------------------------------------
    def shuffle_consts(self, layer: ShuffleLayer):
        """Every element's (input vector, lane) -> (output vector, lane), grouped by lane pair,
        and the one-entry weight block of each lane pair."""
        N = self.N
        x = layer.input
        C_out, P_out = layer.source.shape
        sc, sp = np.divmod(layer.source, x.P)
        co = np.broadcast_to(np.arange(C_out)[:, None], (C_out, P_out))
        ov = ((co // N) * P_out + np.arange(P_out)[None, :]).reshape(-1)
        ol = (co % N).reshape(-1)
        iv = ((sc // N) * x.P + sp).reshape(-1)
        il = (sc % N).reshape(-1)
        order = np.lexsort((iv, ov))
        ov, ol, iv, il = ov[order], ol[order], iv[order], il[order]
        pairs = np.unique(il * N + ol)
        blocks = np.zeros((len(pairs), N, N), np.int64)
        blocks[np.arange(len(pairs)), pairs // N, pairs % N] = self.dtype.one
        offset = self.consts.add(blocks.reshape(-1, N))
        return ov, iv, il * N + ol, pairs, offset

    def shuffle(self, layer: ShuffleLayer, rec: LayerRecord) -> None:
        e, arch, N = self.e, self.arch, self.N
        x, out = layer.input, layer.output
        ov, iv, pair, pairs, offset = self.layer_consts[id(layer)] if self.consts_local else self.shuffle_consts(layer)
        region0 = self.region0
        w_base = region0
        in_base = w_base + (0 if self.consts_local else N)
        room = arch.local_depth - in_base
        n_out_vectors = out.G * out.P
        lo_of = np.full(n_out_vectors, np.iinfo(np.int64).max)
        hi_of = np.full(n_out_vectors, -1)
        np.minimum.at(lo_of, ov, iv)
        np.maximum.at(hi_of, ov, iv)
        starts = np.searchsorted(ov, np.arange(n_out_vectors + 1))
        block_of = {int(p): k for k, p in enumerate(pairs)}
        xb, xgs, _, xws = x.strides()
        ob, ogs, _, ows = out.strides()

        def addresses(vectors, base, gs, ws, P):
            g, p = np.divmod(vectors, P)
            return base + g * gs + p * ws

        a = 0
        while a < n_out_vectors:
            lo, hi, b = np.iinfo(np.int64).max, -1, a
            while b < n_out_vectors:
                nlo, nhi = (min(lo, lo_of[b]), max(hi, hi_of[b])) if hi_of[b] >= 0 else (lo, hi)
                n_in = nhi - nlo + 1 if nhi >= 0 else 0
                if b + 1 - a > arch.accumulator_depth or n_in + (b + 1 - a) > room:
                    break
                lo, hi, b = nlo, nhi, b + 1
            if b == a:
                raise SchedulingError(f"layer {layer.name!r} needs more than {room} vectors of local memory for one output vector")
            rec.stages += 1
            rec.partitions += 1
            n_in = hi - lo + 1 if hi >= 0 else 0
            stage = in_base + n_in
            rec.local_peak = max(rec.local_peak, stage + (b - a))
            rec.acc_peak = max(rec.acc_peak, b - a)
            if n_in:
                self.pairs(DataFlow.DRAM0_TO_LOCAL, in_base + np.arange(n_in), addresses(np.arange(lo, hi + 1), xb, xgs, xws, x.P))
            e.out.append(LoadWeights(0, N, zeroes=True))
            e.matmul(0, 0, b - a, 1, accumulate=False, zeroes=True)
            s0, s1 = starts[a], starts[b]
            band_pair, band_ov, band_iv = pair[s0:s1], ov[s0:s1], iv[s0:s1]
            for pr in np.unique(band_pair):
                sel = band_pair == pr
                k = block_of[int(pr)]
                if self.consts_local:
                    e.load_block(offset + k * N)
                else:
                    e.move(DataFlow.DRAM1_TO_LOCAL, w_base, offset + k * N, N)
                    e.load_block(w_base)
                for o, i in zip((band_ov[sel] - a).tolist(), (band_iv[sel] - lo + in_base).tolist()):
                    e.out.append(MatMul(i, o, 0, 1, 1, True, False))
            e.move(DataFlow.ACC_TO_LOCAL, stage, 0, b - a)
            self.pairs(DataFlow.LOCAL_TO_DRAM0, stage + np.arange(b - a), addresses(np.arange(a, b), ob, ogs, ows, out.P))
            a = b

    # --- pixel remaps ------------------------------------------------------------------------
    def remap(self, layer: RemapLayer, rec: LayerRecord) -> None:
        e, arch = self.e, self.arch
        x, out = layer.input, layer.output
        src = layer.source
        OH, OW = src.shape[:2]
        W, G = x.W, x.G
        region0 = self.region0
        avail = arch.local_depth - region0
        if W * G > avail:
            raise SchedulingError(f"layer {layer.name!r} needs {W * G} vectors of local memory for one input row; the architecture has {avail}")
        xb, xgs, xhs, xws = x.strides()
        ob, ogs, ohs, ows = out.strides()
        oh = 0
        while oh < OH:
            # As many output rows as their distinct input rows fit local memory.
            rows_needed: dict[int, int] = {}
            oh1 = oh
            while oh1 < OH:
                new = set(src[oh1, :, 0].tolist()) - set(rows_needed)
                if (len(rows_needed) + len(new)) * W * G > avail:
                    break
                for r in sorted(new):
                    rows_needed[r] = len(rows_needed)
                oh1 += 1
            if oh1 == oh:
                raise SchedulingError(
                    f"layer {layer.name!r} needs more than {avail} vectors of local memory for the input rows of output row {oh}")
            rec.stages += 1
            rec.partitions += 1
            nr = len(rows_needed)
            rec.local_peak = max(rec.local_peak, region0 + nr * W * G)
            for r, slot in rows_needed.items():
                for g in range(G):
                    e.move(DataFlow.DRAM0_TO_LOCAL, region0 + (g * nr + slot) * W, xb + g * xgs + r * xhs, W, 1, xws)
            for g in range(G):
                for o in range(oh, oh1):
                    slots = np.array([rows_needed[int(r)] for r in src[o, :, 0]])
                    local = region0 + (g * nr + slots) * W + src[o, :, 1]
                    far = ob + g * ogs + o * ohs + np.arange(OW) * ows
                    self.pairs(DataFlow.LOCAL_TO_DRAM0, local, far)
            oh = oh1

    def pairs(self, flow: DataFlow, local: np.ndarray, far: np.ndarray) -> None:
        """Moves of single vectors ``local[k] <-> far[k]``, grouped into strided runs."""
        n = len(local)
        k = 0
        while k < n:
            j = k + 1
            if j < n:
                dl, df = int(local[j] - local[k]), int(far[j] - far[k])
                if self.e._ok0(dl) and self.e._ok1(df):
                    while j + 1 < n and local[j + 1] - local[j] == dl and far[j + 1] - far[j] == df:
                        j += 1
                    self.e.move(flow, int(local[k]), int(far[k]), j - k + 1, dl, df)
                    k = j + 1
                    continue
            self.e.move(flow, int(local[k]), int(far[k]), 1)
            k += 1


def schedule(hir: HirProgram, arch: Architecture, strategy: str = "local-isolated", progress=None) -> LirProgram:
    """Layers to instructions for ``arch``; see the module docstring."""
    return Scheduler(arch, strategy, progress).run(hir)
