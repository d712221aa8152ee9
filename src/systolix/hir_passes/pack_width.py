"""Pack narrow tensors: ``p`` consecutive pixels of a row in one vector, so that no lane idles.

A tensor of C <= N/p channels sits one pixel to a vector of N lanes: ResNet-20's 16-channel
32x32 maps use 16 of a 32x32 array's 32 lanes, and every MatMul vector, post-op and save of the
layers computing them does half the work it could. Packed, lanes ``[i*C, (i+1)*C)`` of packed
pixel ``(y, j)`` hold pixel ``(y, p*j + i)``: the tensor is ``p*C x H x W/p`` and takes half the
vectors (p = 2; its width must be a multiple of p).

Each layer that writes or reads a packed tensor becomes an equivalent layer on the packed grid,
its constants the rounded ones rearranged (this pass runs after the numeric passes), so every
product is one the plain layer makes, plus products with zero weights, which add exact zeros:
the sums are the same integers unless a partial sum saturates (the order of the adds differs).

* inside (packed in, packed out), a KH x KW conv of stride 1 along W: output pixel ``p*j + i``
  tap t reads pixel ``p*j + i + t - PL``, packed pixel ``j + d``, lane block ``ii`` with
  ``p*d + ii = i + t - PL``: a conv of packed taps ``d_min..d_max`` (3x3 pad 1 -> taps j-1, j,
  j+1) whose weights are C x C blocks in place, zero elsewhere; a 1x1 is block-diagonal;
* entry (plain in, packed out): output channel ``i*C + c`` is pixel ``p*x + i``'s channel c:
  kernel width ``KW + (p-1)*SW``, W stride ``p*SW``; a stem with output phases
  (``pack_inputs``' row windows) keeps ``phases/p`` of them, each writing p pixels' channels;
* exit (packed in, plain out): with W stride a multiple of p, a conv over the packed grid with
  stride ``SW/p`` whose weights pick the lanes of the pixels it reads; with stride 1 and a 1x1
  kernel (a bottleneck's expanding conv), p output phases (``ConvLayer.phases``), phase i
  reading lane block i and writing every p-th accumulator, so its post-ops and save see the
  plain layout;
* per-channel constants (bias, post-ops' values, gains, statistics) repeat p times.

A tensor is packed only if every layer around it can be rewritten so; a conv that cannot
(another exit geometry, a mix of packed and plain inputs, a post-op with per-pixel constants)
takes its tensors out, until what is left is consistent. The model's inputs and outputs, views,
slices and tensors read by other layers stay plain, so whatever reads a model output (the
driver, ``systolix.accuracy``, which makes the tensors it compares outputs) sees the plain
layout; ``HirProgram.widths`` names the packed tensors and the HIR printer says so. A reader of
an intermediate tensor's value (``systolix.ir.evaluate``'s storage holds what the program stores)
gets the plain ``C x H x W`` with ``unpack``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddTensor

#: Pixels a vector.
PIXELS = 2


def _all_activations(hir: HirProgram) -> list[Activation]:
    seen: dict[int, Activation] = {}
    for act in list(hir.inputs.values()) + list(hir.outputs.values()):
        seen[id(act)] = act
    for layer in hir.layers:
        for act in layer.reads() + [layer.output]:
            while act is not None:
                seen[id(act)] = act
                act = act.parent[0] if act.parent is not None else None
    return list(seen.values())


def _candidates(hir: HirProgram, p: int) -> set[int]:
    """Tensors narrow enough, only written and read by conv layers, not inputs, outputs or views."""
    acts = _all_activations(hir)
    viewed = {id(a.parent[0]) for a in acts if a.parent is not None}
    fixed = {id(a.root()[0]) for a in list(hir.inputs.values()) + list(hir.outputs.values())}
    writers: dict[int, int] = {}
    other: set[int] = set()
    for layer in hir.layers:
        if isinstance(layer, ConvLayer):
            writers[id(layer.output)] = writers.get(id(layer.output), 0) + 1
        else:
            other.update(id(a.root()[0]) for a in layer.reads() + [layer.output])
    return {id(a) for a in acts
            if a.parent is None and id(a) not in viewed and id(a) not in fixed and id(a) not in other
            and writers.get(id(a)) == 1 and a.order == "planar" and a.C * p <= a.N and a.W % p == 0 and a.W >= p}


def _post_op_packable(op, C: int, packed: set[int]) -> bool:
    """Whether ``op``'s fields are scalars, per-channel vectors or packed tensors."""
    if op.broadcast or op.all_groups:
        return False
    for f in dataclasses.fields(op):
        v = getattr(op, f.name)
        if isinstance(op, AddTensor) and f.name == "stride" and v == (1, 1):
            continue  # a plain add (a strided one reads the operand on a grid of its own)
        if isinstance(v, Activation):
            if id(v) not in packed:
                return False
        elif isinstance(v, np.ndarray):
            if not (v.ndim == 0 or (v.ndim == 1 and v.shape[0] == C)):
                return False
        elif not (v is None or isinstance(v, (bool, int, float, str, np.generic))):
            return False
    return True


def _packed_post_op(op, p: int, new: dict[int, Activation]):
    changes = {}
    for f in dataclasses.fields(op):
        v = getattr(op, f.name)
        if isinstance(v, Activation):
            changes[f.name] = new[id(v)]
        elif isinstance(v, np.ndarray) and v.ndim == 1:
            changes[f.name] = np.tile(v, p)
    return dataclasses.replace(op, **changes)


def _role(layer: ConvLayer, packed: set[int], p: int, max_phases: int) -> str | None:
    """How ``layer`` is rewritten around the packed tensors (None: unchanged), or ``"no"``."""
    out_p = id(layer.output) in packed
    in_p = [id(i.act) in packed for i in layer.inputs]
    post_p = [id(op.tensor) in packed for op in layer.post_ops if op.tensor is not None]
    if not out_p and not any(in_p):
        return "no" if any(post_p) else None
    KW, (SW, dw), (pl, pr) = layer.kernel[1], (layer.stride[1], layer.dilation[1]), (layer.pads[1], layer.pads[3])
    if dw != 1 or (any(in_p) and not all(in_p)):
        return "no"
    if out_p:
        if not all(_post_op_packable(op, layer.output.C, packed) for op in layer.post_ops):
            return "no"
        if all(in_p):
            same = all(i.act.W == layer.output.W for i in layer.inputs)
            d_max = (p - 1 + KW - 1 - pl) // p
            return "inside" if same and SW == 1 and layer.phases == 1 and pl + pr == KW - 1 and d_max >= 0 else "no"
        if layer.phases > 1:
            ok = layer.phases % p == 0 and layer.output.W % layer.phases == 0 and all(i.weights is not None for i in layer.inputs)
            return "entry phases" if ok else "no"
        return "entry" if _entry_pads(layer, p) is not None else "no"
    if any(post_p) or layer.phases > 1:
        return "no"
    if SW % p == 0:
        return "exit strided" if _exit_geometry(layer, p) is not None else "no"
    if KW == 1 and SW == 1 and pl == pr == 0 and p <= max_phases:
        return "exit phases"
    return "no"


def _right_pad(w_in: int, w_out: int, kw: int, sw: int, pl: int) -> int | None:
    """The right pad that makes a conv over ``w_in`` pixels give ``w_out`` (None: none does)."""
    pr = max(0, (w_out - 1) * sw + kw - w_in - pl)
    return pr if (w_in + pl + pr - kw) // sw + 1 == w_out else None


def _entry_pads(layer: ConvLayer, p: int):
    (_, KW), (_, SW), pl = layer.kernel, layer.stride, layer.pads[1]
    return _right_pad(layer.inputs[0].act.W, layer.output.W // p, KW + (p - 1) * SW, p * SW, pl)


def _exit_geometry(layer: ConvLayer, p: int):
    """``(d_min, d_max, right pad)`` of a strided exit over the packed grid, or None."""
    (_, KW), (_, SW), pl = layer.kernel, layer.stride, layer.pads[1]
    d_min, d_max = math.floor(-pl / p), math.floor((KW - 1 - pl) / p)
    pr = _right_pad(layer.inputs[0].act.W // p, layer.output.W, d_max - d_min + 1, SW // p, -d_min)
    return None if pr is None else (d_min, d_max, pr)


def _dense(inp: ConvInput) -> np.ndarray:
    return np.asarray(inp.dense(), np.float32)


def _rewrite(layer: ConvLayer, role: str, p: int, new: dict[int, Activation]) -> ConvLayer:
    KH, KW = layer.kernel
    SH, SW = layer.stride
    pt, pl, pb, pr = layer.pads
    Co = layer.output.C
    out = new.get(id(layer.output), layer.output)
    inputs: list[ConvInput] = []
    changes: dict = {}
    for inp in layer.inputs:
        act = new.get(id(inp.act), inp.act)
        Ci = inp.act.C
        if role == "inside":
            if inp.diagonal is not None and KW == 1:
                inputs.append(ConvInput(act, diagonal=np.tile(inp.diagonal, (p, 1, 1))))
                continue
            w = _dense(inp)
            d_min, d_max = math.floor(-pl / p), (p - 1 + KW - 1 - pl) // p
            packed = np.zeros((p * Co, p * Ci, KH, d_max - d_min + 1), np.float32)
            for i in range(p):
                for t in range(KW):
                    d, ii = divmod(i + t - pl, p)
                    packed[i * Co:(i + 1) * Co, ii * Ci:(ii + 1) * Ci, :, d - d_min] = w[:, :, :, t]
            changes.update(kernel=(KH, d_max - d_min + 1), pads=(pt, -d_min, pb, d_max))
        elif role == "entry":
            w = _dense(inp)
            kw2 = KW + (p - 1) * SW
            packed = np.zeros((p * Co, Ci, KH, kw2), np.float32)
            for i in range(p):
                packed[i * Co:(i + 1) * Co, :, :, i * SW:i * SW + KW] = w
            changes.update(kernel=(KH, kw2), stride=(SH, p * SW), pads=(pt, pl, pb, _entry_pads(layer, p)))
        elif role == "entry phases":
            w = inp.weights  # [Co, Ci, KH, phases]: phase m*p + i is packed phase m's lane block i
            k = layer.phases
            packed = np.zeros((p * Co, w.shape[1], KH, k // p), np.float32)
            for i in range(p):
                packed[i * Co:(i + 1) * Co] = w[:, :, :, i::p]
            changes.update(phases=k // p)
        elif role == "exit strided":
            w = _dense(inp)
            d_min, d_max, right = _exit_geometry(layer, p)
            packed = np.zeros((Co, p * Ci, KH, d_max - d_min + 1), np.float32)
            for t in range(KW):
                d, ii = divmod(t - pl, p)
                packed[:, ii * Ci:(ii + 1) * Ci, :, d - d_min] = w[:, :, :, t]
            changes.update(kernel=(KH, d_max - d_min + 1), stride=(SH, SW // p), pads=(pt, -d_min, pb, right))
        else:  # exit phases: phase i reads lane block i (a 1x1 kernel along W)
            w = _dense(inp)
            packed = np.zeros((Co, p * Ci, KH, p), np.float32)
            for i in range(p):
                packed[:, i * Ci:(i + 1) * Ci, :, i] = w[:, :, :, 0]
            changes.update(phases=p)
        inputs.append(ConvInput(act, weights=packed))
    if id(layer.output) in new:
        changes.update(bias=np.tile(layer.bias, p), post_ops=[_packed_post_op(op, p, new) for op in layer.post_ops])
        if layer.statistics is not None:
            changes.update(statistics=tuple(np.tile(s, p) for s in layer.statistics))
    return dataclasses.replace(layer, inputs=inputs, output=out, **changes)


def unpack(value: np.ndarray, p: int) -> np.ndarray:
    """A packed tensor's ``[p*C, H, W/p]`` value as the plain ``[C, H, W]``."""
    pc, h, w = value.shape
    return value.reshape(p, pc // p, h, w).transpose(1, 2, 3, 0).reshape(pc // p, h, w * p)


def pack_width(hir: HirProgram, ctx=None) -> HirProgram:
    """The pass: every tensor that can be is packed ``PIXELS`` pixels a vector (``ctx.pack_width``
    False: none)."""
    if ctx is not None and not getattr(ctx, "pack_width", True):
        return hir
    p = PIXELS
    # An exit's phases write every p-th accumulator: p is at most the largest stride encoded.
    max_phases = 1 << (ctx.arch.stride1_depth - 1) if ctx is not None else 128
    packed = _candidates(hir, p)
    roles: dict[int, str | None] = {}
    changed = True
    while changed and packed:
        changed = False
        for k, layer in enumerate(hir.layers):
            if not isinstance(layer, ConvLayer):
                continue
            role = _role(layer, packed, p, max_phases)
            roles[k] = role
            if role == "no":
                drop = {id(layer.output)} | {id(i.act) for i in layer.inputs} | {id(op.tensor) for op in layer.post_ops}
                packed -= drop
                changed = True
    if not packed:
        return hir
    acts = {id(a): a for a in _all_activations(hir)}
    new = {i: Activation(acts[i].name, p * acts[i].C, acts[i].H, acts[i].W // p, acts[i].N, order=acts[i].order)
           for i in packed}
    layers = [layer if roles.get(k) is None else _rewrite(layer, roles[k], p, new) for k, layer in enumerate(hir.layers)]
    gains = {name: (np.tile(g, p) if any(layer.name == name and id(layer.output) in packed for layer in hir.layers) else g)
             for name, g in hir.gains.items()}
    widths = dict(hir.widths)
    widths.update({acts[i].name: p for i in packed})
    return dataclasses.replace(hir, layers=layers, gains=gains, widths=widths)
