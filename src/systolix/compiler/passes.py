"""The compiler's passes, in the order the driver runs them; each ``(ir, ctx) -> ir``.

``model`` passes take the whole model (the placed graph, then the partitioned ``Program``);
``segment`` passes take one accelerator segment's IR and run on every accelerator segment::

    Graph --place on host--> Graph --partition--> Program
    per segment: Graph --lower--> HIR --through interleaves, fold batch norms, fuse post-ops,
                 fold pads into pools,
                 eliminate dead layers, subsample strided reads, merge residual convs,
                 split wide inputs,
                 [separate averages, split long reductions, estimate ranges, tensor exponents,
                  amplify weights, correct biases: plain compiles (estimated gains, the default)]
                 [separate averages, split long reductions, measure ranges, tensor exponents,
                  amplify weights, round weights, correct output offsets: calibrated compiles], pack inputs, fuse strided pools, fuse preactivations,
                 pack width, merge post-ops--> HIR --place constants--> Plan
    Program --split constants--> Program
    per segment: Plan --allocate memory, tile layers--> Plan --emit--> LIR
                 --bind memories, roll up, schedule--> LIR --encode--> Artifacts
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from systolix.backend import bind_memories, encode
from systolix.codegen import emit
from systolix.codegen.rollup import roll_up
from systolix.codegen.schedule import schedule
from systolix.compiler.placement import place_on_host
from systolix.compiler.segments import partition_graph, split_constants
from systolix.hir_passes.amplify_weights import amplify_weights
from systolix.hir_passes.correct_biases import correct_biases
from systolix.hir_passes.correct_output_offsets import correct_output_offsets
from systolix.hir_passes.eliminate_dead_layers import eliminate_dead_layers
from systolix.hir_passes.estimate_ranges import estimate_ranges
from systolix.hir_passes.fold_batch_norms import fold_batch_norms
from systolix.hir_passes.fuse_pools import fold_pads_into_pools, fuse_strided_pools
from systolix.hir_passes.fuse_post_ops import fuse_post_ops
from systolix.hir_passes.fuse_preactivations import fuse_preactivations
from systolix.hir_passes.measure_ranges import measure_ranges
from systolix.hir_passes.merge_post_ops import merge_post_ops
from systolix.hir_passes.merge_reduction_parts import merge_reduction_parts
from systolix.hir_passes.merge_residual_convs import merge_residual_convs
from systolix.hir_passes.pack_inputs import pack_inputs
from systolix.hir_passes.pack_width import pack_width
from systolix.hir_passes.round_weights import round_weights
from systolix.hir_passes.separate_averages import separate_averages
from systolix.hir_passes.split_long_reductions import split_long_reductions
from systolix.hir_passes.split_wide_inputs import split_wide_inputs
from systolix.hir_passes.subsample_strided_reads import subsample_strided_reads
from systolix.hir_passes.tensor_exponents import tensor_exponents
from systolix.hir_passes.through_interleaves import through_interleaves
from systolix.lowering import lower
from systolix.planning.allocators import allocate_memory
from systolix.planning.constants import place_constants
from systolix.planning.tiling import tile_layers

MODEL, SEGMENT = "model", "segment"
# Passes whose IRs a second run of the same compile takes from the first (``CompileContext.memo``):
# the calibration's float runs and the weights' rounding from them, most of a calibrated compile.
MEMOISED = ("measure ranges", "round weights")


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable
    scope: str


PASSES = (
    Pass("place on host", place_on_host, MODEL),
    Pass("partition", partition_graph, MODEL),
    Pass("lower", lower, SEGMENT),
    Pass("through interleaves", through_interleaves, SEGMENT),
    Pass("fold batch norms", fold_batch_norms, SEGMENT),
    Pass("fuse post-ops", fuse_post_ops, SEGMENT),
    Pass("fold pads into pools", fold_pads_into_pools, SEGMENT),
    Pass("eliminate dead layers", eliminate_dead_layers, SEGMENT),
    Pass("subsample strided reads", subsample_strided_reads, SEGMENT),
    Pass("merge residual convs", merge_residual_convs, SEGMENT),
    Pass("split wide inputs", split_wide_inputs, SEGMENT),
    Pass("separate averages", separate_averages, SEGMENT),
    Pass("split long reductions", split_long_reductions, SEGMENT),
    Pass("measure ranges", measure_ranges, SEGMENT),
    Pass("estimate ranges", estimate_ranges, SEGMENT),
    Pass("tensor exponents", tensor_exponents, SEGMENT),
    Pass("amplify weights", amplify_weights, SEGMENT),
    Pass("correct biases", correct_biases, SEGMENT),
    Pass("round weights", round_weights, SEGMENT),
    Pass("correct output offsets", correct_output_offsets, SEGMENT),
    Pass("pack inputs", pack_inputs, SEGMENT),
    Pass("fuse strided pools", fuse_strided_pools, SEGMENT),
    Pass("fuse preactivations", fuse_preactivations, SEGMENT),
    Pass("pack width", pack_width, SEGMENT),
    Pass("merge post-ops", merge_post_ops, SEGMENT),
    Pass("merge reduction parts", merge_reduction_parts, SEGMENT),
    Pass("place constants", place_constants, SEGMENT),
    Pass("split constants", split_constants, MODEL),
    Pass("allocate memory", allocate_memory, SEGMENT),
    Pass("tile layers", tile_layers, SEGMENT),
    Pass("emit", emit, SEGMENT),
    Pass("bind memories", bind_memories, SEGMENT),
    Pass("roll up", roll_up, SEGMENT),
    Pass("schedule", schedule, SEGMENT),
    Pass("encode", encode, SEGMENT),
)
