"""The compiler's passes, in order, each a plain function from one IR to the next.

    ONNX --frontend.to_graph--> Graph --lower--> HirProgram
         [--split_long_reductions--> HirProgram --amplify_weights--> HirProgram
          --round_weights--> HirProgram, given calibration samples]
         --schedule--> LirProgram --roll_up_program--> LirProgram
         --backend.build_artifacts--> Artifacts

``compile_graph`` runs all but the first for one accelerator segment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from systolix.arch import Architecture
from systolix.backend import Artifacts, build_artifacts
from systolix.ir import Graph
from systolix.scheduler.codegen import LirProgram, schedule
from systolix.scheduler.hir import HirProgram
from systolix.scheduler.lowering import lower
from systolix.scheduler.precision import amplify_weights, calibrate
from systolix.scheduler.reductions import split_long_reductions
from systolix.scheduler.rounding import round_weights
from systolix.scheduler.rollup import roll_up


def roll_up_program(lir: LirProgram, arch: Architecture) -> LirProgram:
    """``roll_up`` layer by layer, keeping the layer map's instruction ranges right."""
    from systolix.scheduler.codegen import Emitter

    e = Emitter(arch)
    out: list = []
    for rec in lir.layers:
        merged = roll_up(lir.instructions[rec.first:rec.end], e.max_count, e.max_stride0, e.max_stride1)
        rec.first = len(out)
        out.extend(merged)
        rec.end = len(out)
    lir.instructions = out
    return lir


PASSES = (
    ("lower", lower),
    ("split long reductions", split_long_reductions),
    ("amplify weights", amplify_weights),
    ("round weights", round_weights),
    ("schedule", schedule),
    ("roll up", roll_up_program),
    ("backend", build_artifacts),
)


@dataclass
class SegmentResult:
    hir: HirProgram
    lir: LirProgram
    artifacts: Artifacts


def compile_graph(graph: Graph, arch: Architecture, name: str, strategy: str = "local-isolated",
                  listing: bool = False, progress: Callable[[str, int, int], None] | None = None,
                  calibration: Sequence[dict] | None = None) -> SegmentResult:
    """One accelerator program from a graph every node of which the accelerator runs.

    ``calibration``: sample inputs of the graph (dicts of ONNX-shaped arrays); with them the
    long one-pixel reductions are split into parts (``systolix.scheduler.reductions``), the
    weights are amplified as far as the samples' accumulator ranges allow, then rounded to keep
    the layers' outputs on the samples close to the float ones.
    ``progress(step, done, total)``: step ``"calibrating"`` counts float runs on the samples,
    ``"scheduling"`` layers.
    """
    hir = lower(graph, arch.array_size, arch.data_type)
    if calibration:
        hir = split_long_reductions(hir, arch)
        ranges = calibrate(hir, calibration, arch.data_type,
                           None if progress is None else (lambda done, total: progress("calibrating", done, total)))
        hir = amplify_weights(hir, arch, ranges)
        hir = round_weights(hir, arch, {i: r.gram for i, r in ranges.items() if r.gram is not None})
    lir = schedule(hir, arch, strategy, None if progress is None else (lambda done, total: progress("scheduling", done, total)))
    lir = roll_up_program(lir, arch)
    artifacts = build_artifacts(name, arch, hir, lir, listing)
    return SegmentResult(hir, lir, artifacts)
