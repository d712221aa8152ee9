"""Drop layers whose results nothing reads (a Dropout mask's consumers, a Split's unused parts,
a layer fusion left without readers), last to first. Never refuses: a layer writing any part
of a tensor that an output or a live layer reads stays."""

from __future__ import annotations

import dataclasses

from systolix.ir.hir import HirProgram


def eliminate_dead_layers(hir: HirProgram, ctx=None) -> HirProgram:
    live_roots = {id(a.root()[0]) for a in hir.outputs.values()}
    kept = []
    for layer in reversed(hir.layers):
        if id(layer.output.root()[0]) in live_roots:
            kept.append(layer)
            for a in layer.reads():
                live_roots.add(id(a.root()[0]))
    return dataclasses.replace(hir, layers=list(reversed(kept)))
