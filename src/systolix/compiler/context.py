"""What every pass may read besides its IR: the compile's settings and where it reports."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from systolix.arch import Architecture


#: The TCUs a compile may be tuned for (``CompileContext.tune``), named as the boards' ``timing``.
TUNES = ("tensil", "rtl")


@dataclass
class CompileContext:
    """The architecture and strategy, the calibration samples, whether nodes may go to the
    host and programs be cut, progress reporting, and caches shared by the passes.

    A segment's passes get a copy for their segment (``for_segment``): ``segment`` is its name
    (the program's files are named after it) and ``samples`` its own inputs' values.
    """

    arch: Architecture
    strategy: str = "local-isolated"
    samples: list[dict] | None = None
    host: bool = True
    split: bool = True
    listing: bool = False
    name: str = "model"
    segment: str = ""
    progress: Callable[[str, int, int], None] | None = None
    onnx_model: Any = None
    probes: dict = field(default_factory=dict)
    """onnxruntime probes of resize nodes (``systolix.lowering.ops.resize``): placement and
    every lowering of a segment ask the same questions."""
    split_layers: dict[str, int] = field(default_factory=dict)
    """Nodes ``split_constants`` split by output channels (too large for DRAM1), each with its
    number of slices."""
    merged_parts: dict[str, list[str]] = field(default_factory=dict)
    """Set by ``merge_reduction_parts``: each layer that takes parts, with the parts' names (every
    segment's: the segments' contexts share the dict; in a batch program without
    ``merge_batch_parts``, the parts it would merge)."""
    merge_only: set[str] | None = None
    """Merge parts only into these layers (``compile_model``'s per-layer choice in a batch
    program); None: into every layer."""
    catch_up: Callable[[Any], Any] | None = None
    """Set by the driver: brings the segments of a re-partitioned program as far as the passes
    before the current one (``split_constants`` cuts programs)."""
    pack_inputs: bool = True
    """Pack few-channel inputs for the conv that reads them (``systolix.hir_passes.pack_inputs``)."""
    pack_width: bool = True
    """Store narrow tensors two pixels a vector (``systolix.hir_passes.pack_width``)."""
    pipeline: bool = True
    """Let conv layers double-buffer across the two lock halves of local memory
    (``systolix.planning.tiling``) when its cost model prefers it."""
    tune: str = "tensil"
    """The TCU whose timing the planner's cost model prices plans for (``TUNES``): ``"tensil"``,
    Tensil's, whose decoder runs DRAM moves and the array's work one after another; ``"rtl"``,
    the one ``systolix rtl`` generates, which overlaps them (double-buffered plans pay there).
    Programs run the same on both; only their speed differs."""
    schedule: bool = True
    """Give consecutive conv tiles alternate accumulators where they fit and interleave each
    tile's post-ops and save with the next tile's weight loads (``systolix.codegen.schedule``)."""
    fuse_pools: bool = True
    """Fold a zero Pad into the max pool reading it, and save a 1x1 strided max pool of a conv's
    output from that conv's tail (``systolix.hir_passes.fuse_pools``)."""
    fuse_preactivations: bool | None = None
    """Compute a per-channel affine layer reading a conv's output (a pre-activation batch norm
    and ReLU) in that conv's tail (``systolix.hir_passes.fuse_preactivations``); ``None``: unless
    the strategy keeps activations in local memory."""
    merge_residual_convs: bool = True
    """Compute two convs of the same geometry that a residual add sums as one layer accumulating
    both (``systolix.hir_passes.merge_residual_convs``)."""
    merge_parts: bool = True
    """Sum a reduction's parts beside its layer's tile instead of in layers of their own
    (``systolix.hir_passes.merge_reduction_parts``; in a batch program with
    ``merge_batch_parts``)."""
    merge_batch_parts: bool = False
    """In a batch program, merge the parts too (``compile_model`` compiles a batch program with
    and without, and keeps the fastest under the latency model)."""
    subsample_strided_reads: bool = True
    """Compute (or store) a tensor that only strided 1x1 convs read at the pixels they read
    (``systolix.hir_passes.subsample_strided_reads``)."""
    split_maps: bool = True
    """Sum a long reduction over a map (a conv of many input channels) in parts, each with its own
    gains, where its passes cost little (``systolix.hir_passes.split_long_reductions``)."""
    batch: int = 1
    """Images one program runs (``systolix compile --batch``): each weight tile loaded into the
    array streams every image's vectors before the next (``systolix.planning.tiling``)."""
    estimate_gains: bool = True
    """Plain compiles: amplify weights by gains from ranges estimated from the model itself
    (``systolix.hir_passes.estimate_ranges``); ``False``: no gains without calibration data."""
    output_offsets: dict | None = None
    """Calibrated compiles, their second run: per model output, each channel's mean error on the
    samples, for ``systolix.hir_passes.correct_output_offsets`` to take out."""
    memo: dict | None = None
    """The IRs ``MEMOISED`` passes returned, by (pass, segment): a second run of the same compile
    (``output_offsets``) takes them instead of running them again (the calibration's float runs)."""

    def reporter(self, step: str) -> Callable[[int, int], None] | None:
        """``progress`` for one step of this segment (``"calibrating"``, ``"scheduling"``), or None."""
        if self.progress is None:
            return None
        return lambda done, total: self.progress(f"{step} {self.segment}", done, total)

    def for_segment(self, name: str, samples: list[dict] | None) -> "CompileContext":
        return dataclasses.replace(self, segment=name, samples=samples)
