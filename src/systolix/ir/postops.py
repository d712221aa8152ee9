"""Post-ops: the accumulator operations a conv layer applies after its matrix multiplication.

Each kind is a class registered under its name in ``PostOp.KINDS`` and owns everything about
itself: its float semantics (``evaluate``, what the float evaluation of the HIR and calibration
run), the constants it needs (``constants``: vectors for the SIMD unit, or whole tensors for the
constant image) and the instructions that apply it to a tile of accumulators (``emit``). A new
element-wise op on the accelerator is one more subclass, wherever it is defined (the lowering of
HardSigmoid defines its own).

``emit`` gets a ``Tile`` (``systolix.codegen.conv``): the emitter ``e``, the output channel
groups ``go0..go1`` and rows ``oh0..oh0+rows`` (``OW`` pixels each) it holds group by group from
accumulator address 0 (``group_vectors(go)``), a local staging area, the accumulator addresses
of the layer's SIMD constants (``acc_const``, ``channel_constant``), of a second tile
(``acc_scratch``) and of broadcast operands (``acc_bcast``). Addresses are LIR's tagged ones.
SIMD operand 0 is the vector read, 1 the one register every Tensil architecture has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from systolix.ir.structure import describe_array
from systolix.isa import SimdOp

# The node of the accumulator adds that sum a reduction's parts (``split_long_reductions``,
# ``split_wide_inputs``) into its last part.
PART_NODE = "sum of parts"


@dataclass(eq=False)
class PostOp:
    """Base of the post-op kinds. ``node``: the ONNX node it comes from (for messages)."""

    node: str = field(default="", kw_only=True)

    kind: ClassVar[str] = ""
    KINDS: ClassVar[dict[str, type["PostOp"]]] = {}
    swappable: ClassVar[bool] = False
    """An operation of the layer's value with another tensor that gives the same result with
    the two swapped (``a + b``): it may join the layer computing either operand."""
    tile_copies: ClassVar[int] = 1
    """Tiles of accumulators the operation needs (2: its tensor operand beside the tile)."""
    broadcast: ClassVar[bool] = False
    """Its tensor operand is one vector per channel group, kept beside the tile."""
    all_groups: ClassVar[bool] = False
    """It works across the channels of a pixel (softmax): every channel group in one tile."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            PostOp.KINDS[cls.kind] = cls

    @property
    def tensor(self):
        """The activation this operation reads, if any."""
        return None

    @property
    def written(self):
        """The activation this operation writes (a copy of the tile saved midway), if any."""
        return None

    def evaluate(self, acc: np.ndarray, read: Callable[[Any], np.ndarray]) -> np.ndarray:
        """The float result on ``acc`` (``[C, H, W]``, float64); ``read(act)`` reads a tensor."""
        raise NotImplementedError

    def constants(self, c: "ConstantSink") -> Any:
        """Add the constants this operation needs to ``c``; returns what ``emit`` needs to find them."""
        return None

    @property
    def accumulator_clocks(self) -> int | None:
        """Accumulator clocks a vector where they differ from its kind's
        (``systolix.planning.tiling.POST_OP_CLOCKS``); None: the kind's."""
        return None

    def emit(self, t: Any, slot: Any) -> None:
        raise NotImplementedError

    def text(self) -> str:
        return self.kind


class ConstantSink:
    """Where a layer's post-ops put their constants, in their order: SIMD vectors (loaded into
    the accumulators beside the tile, ``simd``) or tensors stored in the constant image
    (``image``). ``q`` rounds floats to the data type's raw values."""

    def __init__(self, N: int, groups: int, q: Callable[[np.ndarray], np.ndarray], image: Callable[[np.ndarray], int]):
        self.N, self.G, self.q = N, groups, q
        self.vectors: list[np.ndarray] = []
        self._image = image

    def simd(self, vectors) -> int:
        """Append raw vectors for the SIMD unit; returns the first one's index."""
        first = len(self.vectors)
        self.vectors.extend(vectors)
        return first

    def image(self, vectors: np.ndarray) -> int:
        """Store raw vectors in the constant image now; returns their offset there."""
        return self._image(vectors)

    def channel_vectors(self, values: np.ndarray) -> np.ndarray:
        """Per-channel values as G raw vectors (padding lanes zero)."""
        padded = np.zeros(self.G * self.N, np.float32)
        padded[: len(values)] = values
        return self.q(padded).reshape(self.G, self.N)

    def per_channel(self, values: np.ndarray) -> tuple[int, bool]:
        """One vector if every channel has the same value (it serves every group), else one per
        group: ``(first index, uniform)``."""
        if np.all(values == values[0]):
            return self.simd([self.q(np.full(self.N, values[0]))]), True
        return self.simd(list(self.channel_vectors(values))), False


def _channels(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.float64)[:, None, None]


# --- operations with another tensor ------------------------------------------------------------
@dataclass(eq=False)
class AddTensor(PostOp):
    """``+ tensor`` (a residual add, or the parts of a split reduction). ``stride`` ``(sh, sw)``:
    the operand's every ``sh``-th row's every ``sw``-th pixel (a layer computing only the pixels a
    strided 1x1 conv reads, ``systolix.hir_passes.subsample_strided_reads``)."""

    operand: Any = None
    stride: tuple[int, int] = (1, 1)
    kind: ClassVar[str] = "add"
    swappable: ClassVar[bool] = True

    @property
    def tensor(self):
        return self.operand

    def evaluate(self, acc, read):
        sh, sw = self.stride
        return acc + read(self.operand)[..., ::sh, ::sw]

    def emit(self, t, slot) -> None:
        e, memory = t.e, t.memory
        base, gs, hs, ws = memory.strides(self.operand)
        n = t.per_group
        sh, sw = self.stride
        if memory.on_chip(self.operand):
            for go in t.groups():
                if (sh, sw) == (1, 1):
                    e.move(base + go * gs + t.oh0 * hs, t.group_base(go), n, accumulate=True)
                    continue
                for r in range(t.rows):  # a strided row of the operand onto each row of the tile
                    e.move(base + go * gs + (t.oh0 + r) * sh * hs, t.group_base(go) + r * t.OW, t.OW, sw * ws, 1, accumulate=True)
            return
        for go in t.groups():
            e.load_rows(t.stage + (go - t.go0) * n, base + go * gs + t.oh0 * sh * hs, t.rows, t.OW, sh * hs, sw * ws)
        e.move(t.stage, t.acc, t.n_vec, accumulate=True)

    def text(self) -> str:
        every = f" (every {self.stride[0]}th row's every {self.stride[1]}th pixel)" if self.stride != (1, 1) else ""
        return f"add {self.operand.name}{every}"


@dataclass(eq=False)
class AddPart(PostOp):
    """``+ values * (bias + the part's own sum)``: a part of a reduction summed in parts
    (``split_long_reductions``) made beside the tile instead of in a layer of its own
    (``systolix.hir_passes.merge_reduction_parts``). The layer's inputs ``inputs`` are the part's
    (``sources``, the same ``ConvInput`` objects, and the layer's geometry); for each output
    group its bias and weight blocks go through the array into the tile's second copy, and one
    SIMD multiply a vector undoes the part's gain and adds the product into the tile. The part no
    longer saves its partial map and the layer no longer loads it back: the product is rounded
    and added exactly as before, so the result is bit for bit the same."""

    inputs: tuple[int, ...] = ()
    sources: list = field(default_factory=list)
    bias: np.ndarray = None
    values: np.ndarray = None
    part: str = ""
    geometry: tuple = ()
    """``(kernel, stride, dilation, pads)`` of the layer (a part shares its layer's)."""
    kind: ClassVar[str] = "add_part"
    tile_copies: ClassVar[int] = 2

    def evaluate(self, acc, read):
        from systolix.ir.evaluate import conv_sum

        part = conv_sum(self.sources, self.bias, *self.geometry, acc.shape[-2], acc.shape[-1], read)
        return acc + _channels(self.values) * part

    def constants(self, c):
        # The bias vectors go in the weights' part of the image (``conv_constants``).
        return c.per_channel(self.values)

    def emit(self, t, slot) -> None:
        # The conv emitter has run the part's blocks into the second tile (``codegen.conv``).
        e = t.e
        for go in t.groups():
            scratch = t.acc_scratch + (go - t.go0) * t.per_group
            e.simd(SimdOp.MOVE, 0, 0, 1, read=t.channel_constant(slot, go))
            base = t.group_base(go)
            for v in range(t.per_group):
                e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=scratch + v, write=base + v, accumulate=True)

    def text(self) -> str:
        names = ", ".join(i.act.name for i in self.sources)
        return f"add part {self.part!r} ({names}, bias {describe_array(self.bias)}) times {describe_array(self.values)}"


@dataclass(eq=False)
class MulTensor(PostOp):
    """``* tensor`` of the same shape: the operand goes beside the tile, one multiply a vector."""

    operand: Any = None
    kind: ClassVar[str] = "mul_tensor"
    swappable: ClassVar[bool] = True
    tile_copies: ClassVar[int] = 2

    @property
    def tensor(self):
        return self.operand

    def evaluate(self, acc, read):
        return acc * read(self.operand)

    def emit(self, t, slot) -> None:
        e, memory = t.e, t.memory
        base, gs, hs, ws = memory.strides(self.operand)
        n = t.per_group
        on_chip = memory.on_chip(self.operand)
        for go in t.groups():
            if on_chip:
                e.move(base + go * gs + t.oh0 * hs, t.acc_scratch + (go - t.go0) * n, n)
                continue
            sbase = t.stage + (go - t.go0) * n
            for r in range(t.rows):
                e.move(base + go * gs + (t.oh0 + r) * hs, sbase + r * t.OW, t.OW, ws, 1)
        if not on_chip:
            e.move(t.stage, t.acc_scratch, t.n_vec)
        for v in range(t.n_vec):
            e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc_scratch + v)
            e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=t.acc + v, write=t.acc + v)

    def text(self) -> str:
        return f"multiply by {self.operand.name}"


@dataclass(eq=False)
class _Broadcast(PostOp):
    """An operation with a tensor of one value per channel (``[1, C, 1, 1]``): its vector for
    each channel group goes into the accumulators beside the tile, then into the register.

    Why so (squeeze-excite's ``x * gate``): a SIMD instruction reads one accumulator and takes its
    other operand from a register, so with a group's gate vector in the register (one Move a
    group) each pixel vector of the group is one Multiply, ``rne(x g / 2^bp)``: the float product
    rounded once, as the array would round it, so exact to the output's step. Two accumulator
    operands (``MulTensor``) cost a Move more a vector. A diagonal weight tile built from the gate
    (per group N multiplies by unit vectors and N moves to local memory, then LoadWeights) would
    let the array's pass do the multiply and save the one instruction a vector, but needs weights
    computed at run time, which planning and emission do not have; it pays only where H x W is
    far above N."""

    operand: Any = None
    broadcast: ClassVar[bool] = True
    simd_op: ClassVar[SimdOp] = SimdOp.NOOP

    @property
    def tensor(self):
        return self.operand

    def emit(self, t, slot) -> None:
        e, memory = t.e, t.memory
        base, gs, hs, ws = memory.strides(self.operand)
        groups = t.go1 - t.go0
        if memory.on_chip(self.operand):
            e.move(base + t.go0 * gs, t.acc_bcast, groups, gs, 1)
        else:
            e.move(base + t.go0 * gs, t.stage, groups, gs, 1)
            e.move(t.stage, t.acc_bcast, groups)
        for go in t.groups():
            e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc_bcast + go - t.go0)
            for v in t.group_vectors(go):
                e.simd(self.simd_op, 0, 1, 0, read=v, write=v)


@dataclass(eq=False)
class AddBroadcast(_Broadcast):
    """``+ g`` with ``g`` one value per channel (computed)."""

    kind: ClassVar[str] = "add_bcast"
    simd_op: ClassVar[SimdOp] = SimdOp.ADD

    def evaluate(self, acc, read):
        return acc + read(self.operand).reshape(acc.shape[0], 1, 1)

    def text(self) -> str:
        return f"add {self.operand.name} per channel"


@dataclass(eq=False)
class MulBroadcast(_Broadcast):
    """``* g`` with ``g`` one value per channel (computed; a squeeze-excite gate)."""

    kind: ClassVar[str] = "mul_bcast"
    simd_op: ClassVar[SimdOp] = SimdOp.MULTIPLY

    def evaluate(self, acc, read):
        return acc * read(self.operand).reshape(acc.shape[0], 1, 1)

    def text(self) -> str:
        return f"multiply by {self.operand.name} per channel"


@dataclass(eq=False)
class Save(PostOp):
    """Save the tile as it is now into ``target`` (the layer's second output), then go on: a
    pre-activation ResNet's block sum, kept raw for the next residual add while the layer's
    tail goes on to the next block's batch norm and ReLU (``systolix.hir_passes.fuse_preactivations``).
    ``stride`` ``(sh, sw)``: only every ``sh``-th row's every ``sw``-th pixel (a 1x1 max pool of
    stride ``s``, ResNet v2's shortcut, ``systolix.hir_passes.fuse_pools``)."""

    target: Any = None
    stride: tuple[int, int] = (1, 1)
    pool: int = 1
    """``k`` > 1: the max of each ``k x k`` window (a max pool of stride ``k``, its windows whole
    in the tile: ``systolix.planning.tiling`` makes the tile's rows a multiple of ``k``), computed
    in place after the layer's own save (``after_save``), when the tile is no longer needed."""
    kind: ClassVar[str] = "save"

    @property
    def written(self):
        return self.target

    @property
    def after_save(self) -> bool:
        return self.pool > 1

    def evaluate(self, acc, read):
        return acc

    def saved(self, acc: np.ndarray) -> np.ndarray:
        """What it writes into ``target`` from ``acc`` (``[..., H, W]``)."""
        k = self.pool
        if k > 1:
            H, W = acc.shape[-2] // k, acc.shape[-1] // k
            windows = acc[..., :H * k, :W * k].reshape(acc.shape[:-2] + (H, k, W, k))
            return windows.max(axis=(-3, -1))
        sh, sw = self.stride
        return acc[..., ::sh, ::sw]

    def emit(self, t, slot) -> None:
        if self.pool > 1:
            self._emit_pool(t)
            return
        e, memory = t.e, t.memory
        base, gs, hs, ws = memory.strides(self.target)
        sh, sw = self.stride
        if (sh, sw) == (1, 1):
            e.save_tile(t.acc, t.stage, memory.on_chip(self.target), (base, gs, hs, ws), t.go0, t.go1, t.oh0, t.rows, t.OW)
            return
        rows = [r for r in range(t.rows) if (t.oh0 + r) % sh == 0]
        if not rows:
            return
        OW = self.target.W
        row0 = (t.oh0 + rows[0]) // sh
        on_chip = memory.on_chip(self.target)
        for go in t.groups():
            sbase = t.stage + (go - t.go0) * len(rows) * OW
            for j, r in enumerate(rows):
                dst = base + go * gs + (row0 + j) * hs if on_chip else sbase + j * OW
                e.move(t.group_base(go) + r * t.OW, dst, OW, sw, ws if on_chip else 1)
            if not on_chip:
                e.save_rows(sbase, base + go * gs + row0 * hs, len(rows), OW, hs, ws)

    def _emit_pool(self, t) -> None:
        """Each window's max into the accumulator of its output pixel (never one a later window
        reads: outputs are written in order, each at or before its window's first tap), then
        the pooled rows moved out and saved."""
        e, memory = t.e, t.memory
        k, OW = self.pool, self.target.W
        rows = t.rows // k  # (the tile starts at a multiple of k)
        if not rows:
            return
        base, gs, hs, ws = memory.strides(self.target)
        row0 = t.oh0 // k
        on_chip = memory.on_chip(self.target)
        for go in t.groups():
            g = t.group_base(go)
            for j in range(rows):
                for w in range(OW):
                    taps = [g + (j * k + dy) * t.OW + w * k + dx for dy in range(k) for dx in range(k)]
                    e.simd(SimdOp.MOVE, 0, 0, 1, read=taps[0])
                    for tap in taps[1:-1]:
                        e.simd(SimdOp.MAX, 0, 1, 1, read=tap)
                    e.simd(SimdOp.MAX, 0, 1, 0, read=taps[-1], write=g + j * OW + w)
            if on_chip:
                e.move(g, base + go * gs + row0 * hs, rows * OW)
                continue
            sbase = t.stage + (go - t.go0) * rows * OW
            e.move(g, sbase, rows * OW)
            e.save_rows(sbase, base + go * gs + row0 * hs, rows, OW, hs, ws)

    def text(self) -> str:
        every = f" (every {self.stride[0]}th row's every {self.stride[1]}th pixel)" if self.stride != (1, 1) else ""
        if self.pool > 1:
            every = f" (max of each {self.pool}x{self.pool} window, after the save)"
        return f"save a copy to {self.target.text()}{every}"


# --- operations with constants -------------------------------------------------------------------
@dataclass(eq=False)
class AddConstant(PostOp):
    """``+ values`` (``[C, H, W]``, varying over pixels): stored in the constant image planar per
    channel group and added from there into the accumulators."""

    values: np.ndarray = None
    kind: ClassVar[str] = "add_const"

    def evaluate(self, acc, read):
        return acc + np.asarray(self.values, np.float64).reshape(acc.shape)

    def constants(self, c):
        C, Hc, Wc = self.values.shape
        padded = np.zeros((c.G * c.N, Hc * Wc), np.float32)
        padded[:C] = self.values.reshape(C, -1)
        vectors = c.q(padded).reshape(c.G, c.N, Hc * Wc).transpose(0, 2, 1).reshape(-1, c.N)
        return c.image(vectors), Hc * Wc

    def emit(self, t, slot) -> None:
        e = t.e
        offset, P = slot
        n = t.per_group
        if t.consts_local:
            for go in t.groups():
                e.move(t.consts + offset + go * P + t.oh0 * t.OW, t.group_base(go), n, accumulate=True)
            return
        for go in t.groups():
            e.move(t.consts + offset + go * P + t.oh0 * t.OW, t.stage + (go - t.go0) * n, n)
        e.move(t.stage, t.acc, t.n_vec, accumulate=True)

    def text(self) -> str:
        return f"add constant {describe_array(self.values)}"


@dataclass(eq=False)
class Relu(PostOp):
    """``max(x, 0)``."""

    kind: ClassVar[str] = "relu"

    def evaluate(self, acc, read):
        return np.maximum(acc, 0.0)

    def emit(self, t, slot) -> None:
        t.e.simd(SimdOp.ZERO, dest=1)
        for v in t.vectors():
            t.e.simd(SimdOp.MAX, 0, 1, 0, read=v, write=v)


@dataclass(eq=False)
class Clip(PostOp):
    """``min(max(x, lo), hi)`` (Clip, ReLU6)."""

    lo: float = 0.0
    hi: float = 0.0
    kind: ClassVar[str] = "clip"

    def evaluate(self, acc, read):
        return np.clip(acc, self.lo, self.hi)

    def constants(self, c):
        return c.simd([c.q(np.full(c.N, self.lo)), c.q(np.full(c.N, self.hi))])

    def emit(self, t, slot) -> None:
        e = t.e
        const = t.acc_const + slot
        for k, op in ((0, SimdOp.MAX), (1, SimdOp.MIN)):
            e.simd(SimdOp.MOVE, 0, 0, 1, read=const + k)
            for v in t.vectors():
                e.simd(op, 0, 1, 0, read=v, write=v)

    def text(self) -> str:
        return f"clip {self.lo:g}..{self.hi:g}"


@dataclass(eq=False)
class Slope(PostOp):
    """``x if x >= 0 else x * slope`` per channel (LeakyRelu, PRelu): ``max(x, x * s)`` for
    slopes up to 1, ``min`` for slopes above 1."""

    values: np.ndarray = None
    factors: tuple[np.ndarray, np.ndarray] | None = None
    """The slope as two multiplies, per channel (``systolix.hir_passes.merge_post_ops.slope_factors``):
    ``x * first * second``, each on the data type's grid, their product far nearer the slope
    than the slope rounded (0.1 in FP16BP8: 26/256, 1.6% off; 226/256 * 29/256, 0.006%).
    None: one multiply by the slope rounded."""
    kind: ClassVar[str] = "slope"

    def evaluate(self, acc, read):
        return np.where(acc >= 0, acc, acc * _channels(self.values))

    def constants(self, c):
        if self.factors is not None:
            return c.per_channel(self.factors[0]), c.per_channel(self.factors[1])
        return c.per_channel(self.values)

    @property
    def accumulator_clocks(self) -> int | None:
        return 5 if self.factors is not None else None

    def emit(self, t, slot) -> None:
        e = t.e
        for go in t.groups():
            if self.factors is not None:
                first, second = (t.channel_constant(k, go) for k in slot)
                for v in t.group_vectors(go):
                    e.simd(SimdOp.MOVE, 0, 0, 1, read=first)
                    e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=v)
                    e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=second)
                    e.simd(SimdOp.MAX, 0, 1, 0, read=v, write=v)
                continue
            c = t.channel_constant(slot, go)
            lanes = self.values[go * t.N:(go + 1) * t.N]
            op = SimdOp.MIN if np.all(lanes >= 1) and np.any(lanes > 1) else SimdOp.MAX
            for v in t.group_vectors(go):
                e.simd(SimdOp.MOVE, 0, 0, 1, read=c)
                e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=v)
                e.simd(op, 0, 1, 0, read=v, write=v)

    def text(self) -> str:
        extra = "" if self.factors is None else f" as {describe_array(self.factors[0])} times {describe_array(self.factors[1])}"
        return f"slope {describe_array(self.values)}{extra}"


def _scaled_in_register(t, slot, steps) -> None:
    """A merged tail (``ScaledSlope``, ``ScaledClip``), vector by vector: per-channel constant
    ``slot[0]`` into the register, then each ``(op, k)`` of ``steps`` into the register, its
    input the vector (``k`` None) or constant ``slot[k]``, then the scale ``slot[-1]`` times the
    register written back to the vector: the only op that writes the accumulators."""
    e = t.e
    for go in t.groups():
        consts = [t.channel_constant(k, go) for k in slot]
        for v in t.group_vectors(go):
            e.simd(SimdOp.MOVE, 0, 0, 1, read=consts[0])
            for op, k in steps:
                e.simd(op, 0, 1, 1, read=v if k is None else consts[k])
            e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=consts[-1], write=v)


@dataclass(eq=False)
class ScaledSlope(PostOp):
    """``Scale`` then ``Slope`` (a gain's undo, then LeakyReLU or PReLU) in one pass, for positive
    scales and slopes in ``[0, 1]``: ``max(x, x * slope) * scale`` (a positive scale commutes with
    the slope). Per vector: the slope into the register, times the vector, the larger of the two
    kept there, the scale times it written back: 1 + 1 + 1 + 2 accumulator clocks, where the two
    ops apart take 2 + 4 (``systolix.hir_passes.merge_post_ops``). The slope is taken at the
    amplified sum, before the scale rounds it, so a negative value is rounded once at the
    output's scale rather than twice."""

    scale: np.ndarray = None
    slope: np.ndarray = None
    factors: tuple[np.ndarray, np.ndarray] | None = None
    """The slope as two multiplies (``Slope.factors``): one more accumulator clock a vector."""
    kind: ClassVar[str] = "scaled_slope"

    def evaluate(self, acc, read):
        return np.maximum(acc, acc * _channels(self.slope)) * _channels(self.scale)

    def constants(self, c):
        if self.factors is not None:
            return c.per_channel(self.factors[0]), c.per_channel(self.factors[1]), c.per_channel(self.scale)
        return c.per_channel(self.slope), c.per_channel(self.scale)

    @property
    def accumulator_clocks(self) -> int | None:
        return 6 if self.factors is not None else None

    def emit(self, t, slot) -> None:
        if self.factors is not None:
            _scaled_in_register(t, slot, [(SimdOp.MULTIPLY, None), (SimdOp.MULTIPLY, 1), (SimdOp.MAX, None)])
            return
        _scaled_in_register(t, slot, [(SimdOp.MULTIPLY, None), (SimdOp.MAX, None)])

    def text(self) -> str:
        extra = "" if self.factors is None else f" (as {describe_array(self.factors[0])} times {describe_array(self.factors[1])})"
        return f"slope {describe_array(self.slope)}{extra}, then multiply {describe_array(self.scale)}"


@dataclass(eq=False)
class ScaledClip(PostOp):
    """``Scale`` then ``Clip`` (a gain's undo, then ReLU6 or Clip) in one pass, for positive scales:
    ``clip(x * scale, lo, hi)`` computed as ``clip(x, low, high) * scale``, ``low`` and ``high``
    per channel on the grid of the amplified sum, chosen (``systolix.hir_passes.merge_post_ops``)
    so that the rounded product gives exactly what the two ops apart give for every sum. Per
    vector: ``low`` into the register, the larger of it and the vector, the smaller of that and
    ``high``, the scale times it written back: 1 + 1 + 1 + 2 accumulator clocks against 2 + 4."""

    scale: np.ndarray = None
    lo: float = 0.0
    hi: float = 0.0
    low: np.ndarray = None
    high: np.ndarray = None
    kind: ClassVar[str] = "scaled_clip"

    def evaluate(self, acc, read):
        return np.clip(acc * _channels(self.scale), self.lo, self.hi)

    def constants(self, c):
        return c.per_channel(self.low), c.per_channel(self.high), c.per_channel(self.scale)

    def emit(self, t, slot) -> None:
        _scaled_in_register(t, slot, [(SimdOp.MAX, None), (SimdOp.MIN, 1)])

    def text(self) -> str:
        return f"clip {self.lo:g}..{self.hi:g} at the amplified sum, then multiply {describe_array(self.scale)}"


def _per_channel_simd(t, slot, op) -> None:
    """``x op values`` per channel: each group's vector of values into the register, then one
    SIMD instruction a vector of the group (reads and writes it in place)."""
    for go in t.groups():
        t.e.simd(SimdOp.MOVE, 0, 0, 1, read=t.channel_constant(slot, go))
        for v in t.group_vectors(go):
            t.e.simd(op, 0, 1, 0, read=v, write=v)


@dataclass(eq=False)
class Scale(PostOp):
    """``x * values`` per channel (an average pool's 1/count, a calibrated gain's undo)."""

    values: np.ndarray = None
    kind: ClassVar[str] = "mul"

    def evaluate(self, acc, read):
        return acc * _channels(self.values)

    def constants(self, c):
        return c.per_channel(self.values)

    def emit(self, t, slot) -> None:
        _per_channel_simd(t, slot, SimdOp.MULTIPLY)

    def text(self) -> str:
        return f"multiply {describe_array(self.values)}"


@dataclass(eq=False)
class AddChannels(PostOp):
    """``x + values`` per channel (a batch norm's shift in a layer's tail): one SIMD Add a vector."""

    values: np.ndarray = None
    kind: ClassVar[str] = "add_channels"

    def evaluate(self, acc, read):
        return acc + _channels(self.values)

    def constants(self, c):
        return c.per_channel(self.values)

    def emit(self, t, slot) -> None:
        _per_channel_simd(t, slot, SimdOp.ADD)

    def text(self) -> str:
        return f"add {describe_array(self.values)} per channel"


@dataclass(eq=False)
class ScalePixels(PostOp):
    """``x * values`` per output pixel (``[H, W]``; an average pool whose windows count
    different numbers of values at the borders): one register load per distinct value."""

    values: np.ndarray = None
    kind: ClassVar[str] = "mul_pixel"

    def evaluate(self, acc, read):
        return acc * np.asarray(self.values, np.float64).reshape(1, acc.shape[1], acc.shape[2])

    def constants(self, c):
        raw = c.q(self.values)
        distinct = np.unique(raw)
        return c.simd([np.full(c.N, v, np.int64) for v in distinct]), distinct, raw

    def emit(self, t, slot) -> None:
        e = t.e
        first, distinct, raw = slot
        band = raw[t.oh0:t.oh0 + t.rows].reshape(-1)
        for j, value in enumerate(distinct):
            pixels = np.flatnonzero(band == value)
            if not len(pixels):
                continue
            e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc_const + first + j)
            for go in t.groups():
                for v in (pixels + t.group_base(go)).tolist():
                    e.simd(SimdOp.MULTIPLY, 0, 1, 0, read=v, write=v)

    def text(self) -> str:
        return f"multiply per pixel {describe_array(self.values)}"
