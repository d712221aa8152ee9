"""The plan: what the scheduler decided, as a value.

``Plan`` holds, for one accelerator program, the HIR it plans, the constant image (every
layer's weight blocks, biases and post-op constants, in program order), the memory map (where
each activation lives) and one ``LayerPlan`` per layer: its stages (bands of output rows or
pixels whose inputs fit local memory), its partitions (output channel groups whose results fit
the accumulators), its local-memory and accumulator layout, its weight residency and its loop
order. The emitters (``systolix.codegen``) turn it into instructions without deciding anything.

Local memory has two halves that Tensil's hardware locks separately (a DRAM move into one can
run while the array works on the other); ``LayerPlan.lock_halves`` says which buffers sit in
which, the first step to double-buffering them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from systolix.ir.hir import Activation, HirProgram
from systolix.ir.lir import LOCAL, VARS, Memory
from systolix.ir.structure import Structural

# The one loop order the emitters know today: each stage (band of output rows), then each
# partition (output channel groups), then each group's weight blocks, the band streaming
# through each block (weight-stationary).
ROWS_THEN_GROUPS = "stages > partitions > output groups > weight blocks"
BANDS = "stages (output bands)"
# The same loop nest double-buffered across the two lock halves of local memory: the next
# stage's band (or the next weight chunk) loads while the array works on the current one.
PIPELINED = ROWS_THEN_GROUPS + ", pipelined over the two lock halves"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


@dataclass(eq=False)
class Place:
    """Where one memory object lives: ``memory`` (DRAM0 or local) from vector ``base``."""

    memory: str
    base: int


@dataclass(eq=False)
class MemoryMap:
    """Where every activation (by its root, the tensor that owns the memory) lives, and what
    part of local memory is taken before any layer lays out its buffers.

    ``consts_local``: the constant image sits in local memory from address 0 (local-consts);
    ``region0``: the first local address a layer may use for its own buffers (after the
    constants and, with local-vars, the activations kept on chip).
    ``batch``: images the program runs (``systolix compile --batch``); each activation's span
    holds them one after another, ``root.vectors`` apart. ``image``: the one ``strides``
    addresses (``for_image``).
    """

    places: dict[Activation, Place]
    dram0_vectors: int
    consts_local: bool
    consts_vectors: int
    region0: int
    batch: int = 1
    image: int = 0

    def for_image(self, image: int) -> "MemoryMap":
        """This map addressing image ``image`` of the batch."""
        return MemoryMap(self.places, self.dram0_vectors, self.consts_local, self.consts_vectors, self.region0,
                         self.batch, image)

    def place(self, act: Activation) -> Place:
        root = act.root()[0]
        return self.places[root]

    def on_chip(self, act: Activation) -> bool:
        return self.place(act).memory == "local"

    def strides(self, act: Activation) -> tuple[int, int, int, int]:
        """``(base, group stride, row stride, column stride)``: ``base`` a tagged LIR address
        (``VARS`` or ``LOCAL``), the strides in vectors.

        A tensor relabelled from another (a Reshape that keeps channels and pixel order) has its
        own ``H x W`` split of the same pixels, so rows are counted with its own width.
        """
        root, offset = act.root()
        place = self.places[root]
        base = (LOCAL if place.memory == "local" else VARS) + place.base + self.image * root.vectors
        if root.order == "pixel":
            gs, ps = 1, root.G
        else:
            gs, ps = root.P, 1
        return base + offset * gs, gs, act.W * ps, ps

    def text(self) -> str:
        lines = [f"memory map: {self.dram0_vectors} vectors of DRAM0; constants {self.consts_vectors} vectors in "
                 f"{'local memory from 0' if self.consts_local else 'DRAM1'}; layers' local memory from {self.region0}"]
        for act, place in sorted(self.places.items(), key=lambda item: (item[1].memory, item[1].base)):
            lines.append(f"  {place.memory}[{place.base}..{place.base + act.vectors * self.batch}) {act.text()}"
                         + (f" x{self.batch} images" if self.batch > 1 else ""))
        return "\n".join(lines)


@dataclass(eq=False)
class LayerConstants:
    """Where one layer's constants are in the image (offsets in vectors), and what its emitter
    needs to find them. ``vectors``: how many it added."""

    vectors: int = 0
    data: Any = None


@dataclass(eq=False)
class ConvConstants:
    """A conv layer's constants: per output channel group its bias vector and weight blocks,
    ``blocks[go] = [(input, kh, kw, input group), ...]`` at ``addresses[go] = (bias offset,
    [block offsets])`` (a block equal to the one before it is stored once), ``stored``
    vectors in all; its post-ops' constants (``slots``, one per post-op) and the ``simd``
    vectors loaded beside the accumulators from ``simd_offset``."""

    blocks: list[list[tuple[int, int, int, int]]]
    addresses: list[tuple[int, list[int]]]
    stored: int
    slots: list[Any]
    simd: int
    simd_offset: int
    part_bias: list[list[int]] = field(default_factory=list)
    """Per output group, the bias vector of each part summed apart (``postops.AddPart``), in
    their order; each sits right before the part's first block."""


@dataclass(eq=False)
class PixelMixConstants:
    """A pixel mix's entries sorted by output pixel (rounded coefficients ``q``, zeros dropped)
    and its distinct coefficients' diagonal blocks from ``offset``."""

    out_pixel: np.ndarray
    in_pixel: np.ndarray
    q: np.ndarray
    values: np.ndarray
    offset: int


@dataclass(eq=False)
class ShuffleConstants:
    """A shuffle's elements as (output vector, input vector, lane pair), sorted by output
    vector, and the one-entry weight block of each distinct lane pair from ``offset``."""

    out_vector: np.ndarray
    in_vector: np.ndarray
    pair: np.ndarray
    pairs: np.ndarray
    offset: int


@dataclass(eq=False)
class ConstantImage:
    """The program's constants: raw vectors ``[n, N]`` and each layer's share, in layer order."""

    vectors: np.ndarray
    layers: list[LayerConstants]

    def text(self) -> str:
        lines = [f"constants: {self.vectors.shape[0]} vectors"]
        offset = 0
        for k, c in enumerate(self.layers):
            if c.vectors:
                lines.append(f"  layer {k}: consts[{offset}..{offset + c.vectors})")
            offset += c.vectors
        return "\n".join(lines)


@dataclass(eq=False)
class Buffer:
    """A named region of local memory or of the accumulators: ``[base, base + size)``."""

    name: str
    memory: Memory
    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(eq=False)
class Stage:
    """One band of a layer's output: ``outputs`` = output rows (or pixels, or vectors)
    ``[first, end)``, read from ``inputs`` = input rows (pixels, vectors) ``[first, end)``."""

    outputs: tuple[int, int]
    inputs: tuple[int, int]


@dataclass(eq=False)
class LayerPlan:
    """How one layer runs: shared by every layer kind; ``detail`` holds the numbers only its
    kind's emitter reads (a ``ConvTiling``...)."""

    layer: str
    kind: str
    loop_order: str
    weights: str  # "resident" (loaded once), "streamed" (chunk by chunk), "in place" (local-consts), "none"
    stages: list[Stage]
    partitions: list[tuple[int, int]]  # output channel groups [first, end) computed together
    local: list[Buffer]
    accumulators: list[Buffer]
    local_peak: int
    acc_peak: int
    detail: Any = None

    def lock_halves(self, local_depth: int) -> dict[str, str]:
        """Which lock half of local memory each local buffer sits in (``0``, ``1`` or ``both``)."""
        half = local_depth // 2
        out = {}
        for b in self.local:
            if b.size == 0:
                continue
            out[b.name] = "0" if b.end <= half else "1" if b.base >= half else "both"
        return out

    def text(self, local_depth: int | None = None) -> str:
        lines = [f"{self.kind} {self.layer!r}: {_count(len(self.stages), 'stage')} x {_count(len(self.partitions), 'partition')}; "
                 f"loop order {self.loop_order}; weights {self.weights}"]
        halves = self.lock_halves(local_depth) if local_depth else {}
        local = ", ".join(f"{b.name} [{b.base}..{b.end})" + (f" half {halves[b.name]}" if b.name in halves else "")
                          for b in self.local if b.size)
        lines.append(f"  local: {local or '-'}; peak {self.local_peak}")
        acc = ", ".join(f"{b.name} [{b.base}..{b.end})" for b in self.accumulators if b.size)
        lines.append(f"  accumulators: {acc or '-'}; peak {self.acc_peak}")
        shown = self.stages[:4]
        stages = "; ".join(f"out {s.outputs[0]}..{s.outputs[1]} <- in {s.inputs[0]}..{s.inputs[1]}" for s in shown)
        more = f"; ... ({len(self.stages)} in all)" if len(self.stages) > len(shown) else ""
        lines.append(f"  stages: {stages}{more}")
        parts = self.partitions[:6]
        lines.append("  partitions (channel groups): " + ", ".join(f"{a}..{b}" for a, b in parts)
                     + (f", ... ({len(self.partitions)} in all)" if len(self.partitions) > len(parts) else ""))
        return "\n".join(lines)


@dataclass(eq=False)
class Plan(Structural):
    """One accelerator program as the scheduler decided it (see the module docstring)."""

    hir: HirProgram
    strategy: str
    local_depth: int
    constants: ConstantImage
    memory: MemoryMap | None = None
    layers: list[LayerPlan] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"plan {self.hir.name}: strategy {self.strategy}, {len(self.hir.layers)} layers", self.constants.text()]
        if self.memory is not None:
            lines.append(self.memory.text())
        for k, p in enumerate(self.layers):
            lines.append(f"{k:4d} " + p.text(self.local_depth))
        return "\n".join(lines) + "\n"
