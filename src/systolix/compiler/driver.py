"""The pass driver: runs ``PASSES`` in order, each on the IR the one before returned, the segment
passes on every accelerator segment; verifies the IR between passes and writes it as text when
asked (``systolix compile --dump-ir DIR``)."""

from __future__ import annotations

import re
from pathlib import Path

from systolix.artifacts import write_text_atomic
from systolix.compiler.passes import MEMOISED, MODEL, PASSES, Pass
from systolix.compiler.program import Program, Segment
from systolix.compiler.verify import verify
from systolix.ir import Graph
from systolix.ir.hir import HirProgram
from systolix.ir.lir import LirProgram
from systolix.ir.plan import Plan

KINDS = ((Graph, "graph"), (HirProgram, "hir"), (Plan, "plan"), (LirProgram, "lir"), (Program, "program"))


def _kind(ir) -> str:
    return next((name for cls, name in KINDS if isinstance(ir, cls)), "files")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"


class Driver:
    """Runs ``passes`` with ``ctx``; ``dump_dir``: write every IR there; ``check``: verify it."""

    def __init__(self, ctx, passes: tuple[Pass, ...] = PASSES, dump_dir: str | Path | None = None, check: bool = False):
        self.ctx, self.passes, self.check = ctx, passes, check
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        ctx.catch_up = self.catch_up
        self._at = 0

    def run(self, ir):
        self.dump(ir, "00-input")
        for index, p in enumerate(self.passes):
            self._at = index
            if p.scope == MODEL:
                ir = p.run(ir, self.ctx)
                self.dump(ir, f"{index + 1:02d}-{_slug(p.name)}")
            else:
                for seg in ir.segments:
                    self.advance(seg, index)
        return ir

    def advance(self, seg: Segment, upto: int) -> None:
        """Run on ``seg`` the segment passes up to ``upto`` it has not had yet."""
        if seg.kind != "accelerator":
            return
        ctx = self.ctx.for_segment(seg.name, seg.samples)
        for index in range(seg.done + 1, upto + 1):
            p = self.passes[index]
            if p.scope != MODEL:
                key = (p.name, seg.name)
                if ctx.memo is not None and p.name in MEMOISED and key in ctx.memo:
                    seg.ir = ctx.memo[key]
                else:
                    seg.ir = p.run(seg.ir, ctx)
                    if ctx.memo is not None and p.name in MEMOISED:
                        ctx.memo[key] = seg.ir
                if isinstance(seg.ir, HirProgram):
                    seg.hir = seg.ir
                elif isinstance(seg.ir, Plan):
                    seg.hir = seg.ir.hir
                elif isinstance(seg.ir, LirProgram):
                    seg.lir = seg.ir
                if self.check:
                    verify(seg.ir, ctx)
                self.dump(seg.ir, f"{_slug(seg.name)}/{index + 1:02d}-{_slug(p.name)}")
            seg.done = index

    def catch_up(self, program: Program) -> Program:
        """Bring new segments (a model pass re-partitioned) as far as the passes before it."""
        for seg in program.segments:
            self.advance(seg, self._at - 1)
        return program

    def dump(self, ir, stem: str) -> None:
        if self.dump_dir is None:
            return
        write_text_atomic(self.dump_dir / f"{stem}.{_kind(ir)}.txt", ir.text())


def run_passes(graph: Graph, ctx, dump_dir: str | Path | None = None, check: bool = False, until: str | None = None):
    """The compile of ``graph``: the ``Program`` with every accelerator segment's files as its IR
    (``until``: only the passes up to and including the one of that name)."""
    passes = PASSES
    if until is not None:
        names = [p.name for p in PASSES]
        if until not in names:
            raise ValueError(f"no pass {until!r}; the passes are {', '.join(names)}")
        passes = PASSES[: names.index(until) + 1]
    return Driver(ctx, passes, dump_dir, check).run(graph)
