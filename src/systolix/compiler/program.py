"""The whole model as the compiler holds it once it is partitioned: segments in execution order,
each a run of nodes on the accelerator (with its IR as far as the passes took it) or on the
host (an ONNX model onnxruntime runs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from systolix.ir import Graph
from systolix.ir.structure import Structural


@dataclass(eq=False)
class Segment:
    """A run of nodes (indices into the graph) on the accelerator or on the host.

    ``ir``: an accelerator segment's IR as the passes left it (its graph, then HIR, plan, LIR,
    files); ``hir`` and ``lir`` keep the last of each for the compile summary; ``done``: the
    index in ``PASSES`` of the last pass applied to it (-1: none yet).
    """

    kind: str
    nodes: list[int]
    inputs: list[str]
    outputs: list[str]
    name: str = ""
    ir: Any = None
    hir: Any = None
    lir: Any = None
    samples: list[dict] | None = None
    onnx_bytes: bytes | None = None
    done: int = -1

    @property
    def key(self) -> tuple:
        """What a segment's compile depends on besides the model: its name, nodes and outputs."""
        return self.name, tuple(self.nodes), tuple(self.outputs)


@dataclass(eq=False)
class Program(Structural):
    """The partitioned model: ``cuts`` are the nodes that start a new accelerator program so that
    each one's constants fit (``split_constants``)."""

    name: str
    graph: Graph
    segments: list[Segment]
    cuts: frozenset[int] = field(default_factory=frozenset)

    def text(self) -> str:
        lines = [f"program {self.name}: {len(self.segments)} segments" + (f", cut at nodes {sorted(self.cuts)}" if self.cuts else "")]
        for seg in self.segments:
            nodes = [self.graph.nodes[i].name for i in seg.nodes]
            shown = ", ".join(nodes[:6]) + (f", ... ({len(nodes)} nodes)" if len(nodes) > 6 else "")
            lines.append(f"  {seg.kind} {seg.name}: {shown}")
            lines.append(f"    inputs {seg.inputs}, outputs {seg.outputs}")
            if seg.kind == "host":
                for i in seg.nodes:
                    lines.append(f"    {self.graph.nodes[i].name}: {self.graph.host.get(i, 'runs beside the host nodes')}")
        return "\n".join(lines) + "\n"
