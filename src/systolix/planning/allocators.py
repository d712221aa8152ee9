"""Memory allocators: where activations live.

``allocate_dram0``: every activation (by its root) gets a span of DRAM0, first fit, allocated
before the layer that first writes it and freed after the last layer that reads it (the model's
inputs from the start, its outputs to the end), as Tensil's ``MemorySpanAllocator`` does.
``allocate_local_vars`` (local-vars): intermediate activations live in local memory instead,
first fit and freed after their last reader, while they fit in half of what is left; model
inputs and outputs stay in DRAM0 (the driver reads and writes them there), as do tensors that
pure data movement layers touch.
"""

from __future__ import annotations

import dataclasses

from systolix.ir.hir import Activation, HirProgram, PixelMixLayer, RemapLayer, ShuffleLayer, TensorMatMulLayer
from systolix.ir.plan import MemoryMap, Place, Plan
from systolix.planning.errors import SchedulingError


class FirstFit:
    """Free spans of one memory, ``[start, end)``, kept sorted and merged."""

    def __init__(self, depth: int, name: str):
        self.free: list[list[int]] = [[0, depth]]
        self.depth, self.name = depth, name
        self.top = 0

    def allocate(self, size: int, what: str) -> int:
        for span in self.free:
            if span[1] - span[0] >= size:
                base = span[0]
                span[0] += size
                self.top = max(self.top, base + size)
                return base
        raise SchedulingError(f"{what} needs {size} vectors of {self.name} but only fragments are left ({self.name} depth {self.depth})")

    def release(self, base: int, size: int) -> None:
        free = self.free
        free.append([base, base + size])
        free.sort()
        merged = [free[0]]
        for s in free[1:]:
            if s[0] <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], s[1])
            else:
                merged.append(s)
        self.free = [m for m in merged if m[1] > m[0]]


def allocate_dram0(hir: HirProgram, depth: int, places: dict[Activation, Place], batch: int = 1) -> int:
    """A span of DRAM0 for every activation (``batch`` images of it, one after another), into
    ``places``; returns the vectors used."""
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
        for a in layer.writes():
            r = a.root()[0]
            roots.setdefault(id(r), r)
            first[id(r)] = min(first.get(id(r), k), k)
            last[id(r)] = max(last.get(id(r), k), k)
    for a in hir.outputs.values():
        last[id(a.root()[0])] = end
    dram0 = FirstFit(depth, "DRAM0")
    bases: dict[int, int] = {}
    order = sorted(roots, key=lambda i: (first[i], 0 if first[i] < 0 else 1))
    by_first: dict[int, list[int]] = {}
    for i in order:
        by_first.setdefault(first[i], []).append(i)
    live: list[int] = []
    try:
        for step in range(-1, len(hir.layers)):
            for i in by_first.get(step, []):
                r = roots[i]
                bases[i] = dram0.allocate(r.vectors * batch, f"activation {r.name!r}" + (f" ({batch} images)" if batch > 1 else ""))
                live.append(i)
            for i in [i for i in live if last[i] <= step and last[i] < end]:
                if step >= 0 or last[i] < 0:
                    dram0.release(bases[i], roots[i].vectors * batch)
                    live.remove(i)
        top = dram0.top
    except SchedulingError as first_fit_failed:
        # First fit in program order leaves fragments (ResNet-50 v2's batch-4 program on the 8x8
        # arrays: a 56x56x256 map of four images found no span of 401,408 vectors in 1 M). Placing
        # the largest activations first, each at the lowest address free over its lifetime,
        # packs tighter; only where first fit fails, so that every program that compiled keeps
        # its addresses.
        bases, top = _largest_first({i: roots[i].vectors * batch for i in roots}, {i: (first[i], last[i]) for i in roots})
        if top > depth:
            raise first_fit_failed from None
    for i, base in bases.items():
        places[roots[i]] = Place("dram0", base)
    return top


def _largest_first(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Offsets for spans of ``sizes`` live over the layer steps ``lifetimes`` (first, last;
    inclusive): largest first, each at the lowest offset where it overlaps no placed span that is
    live at the same time (the greedy-by-size arena plan of TensorFlow Lite's memory planner).
    Returns the offsets and the end of the highest span."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    bases: dict[int, int] = {}
    for i in sorted(sizes, key=lambda i: (-sizes[i], lifetimes[i])):
        lo, hi = lifetimes[i]
        busy = sorted((o, e) for o, e, f, l in placed if f <= hi and lo <= l)
        offset = 0
        for o, e in busy:
            if o - offset >= sizes[i]:
                break
            offset = max(offset, e)
        bases[i] = offset
        placed.append((offset, offset + sizes[i], lo, hi))
    return bases, max((e for _, e, _, _ in placed), default=0)


def allocate_local_vars(hir: HirProgram, start: int, local_depth: int, places: dict[Activation, Place], batch: int = 1) -> int:
    """local-vars: places in local memory from ``start`` for the activations that fit; returns
    the size of the local region used."""
    capacity = (local_depth - start) // 2
    excluded = {id(a.root()[0]) for a in list(hir.inputs.values()) + list(hir.outputs.values())}
    for layer in hir.layers:
        if isinstance(layer, (RemapLayer, PixelMixLayer, ShuffleLayer, TensorMatMulLayer)):
            excluded.update(id(a.root()[0]) for a in layer.reads() + [layer.output])
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    roots: dict[int, Activation] = {}
    for k, layer in enumerate(hir.layers):
        for a in layer.writes():
            r = a.root()[0]
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
            size = r.vectors * batch
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
            places[r] = Place("local", start + base)
            live.append((base, size, last[i]))
            top = max(top, base + size)
    return top


def allocate_memory(plan: Plan, ctx) -> Plan:
    """The pass: the plan's memory map. Constants (local-consts) take local memory from 0, then
    (local-vars) the activations kept on chip; layers lay out their buffers after both."""
    hir, arch = plan.hir, ctx.arch
    places: dict[Activation, Place] = {}
    batch = ctx.batch
    dram0 = allocate_dram0(hir, arch.dram0_depth, places, batch)
    consts_local = ctx.strategy in ("local-consts", "local-vars-and-consts")
    consts = int(plan.constants.vectors.shape[0])
    region0 = consts if consts_local else 0
    if ctx.strategy in ("local-vars", "local-vars-and-consts"):
        region0 += allocate_local_vars(hir, region0, arch.local_depth, places, batch)
    return dataclasses.replace(plan, memory=MemoryMap(places, dram0, consts_local, consts, region0, batch))
