"""The lowering's state while it walks a graph: which activation each graph tensor is, and the
layers made so far.

A graph tensor is a ``Ref``: an activation and which of its elements is where. Most ops bind
their output to a new activation laid out as its own shape says (canonical); Reshape, Flatten,
Squeeze, Unsqueeze and Transpose only relabel, so their output may be a *view* of another
activation's elements, which a consumer that needs the tensor laid out as its shape wants
materialises (a remap layer when only pixels move, a shuffle through the array otherwise).

Support checks (``..._reason``) say why a node cannot run on the accelerator given this state,
or None; the op handlers (``systolix.lowering.ops``) call them in ``check`` and lower only what
they accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from systolix.errors import SystolixError
from systolix.ir import Graph, Node
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram, Layer, RemapLayer, ShuffleLayer
from systolix.ir.layout import canonical_chw, canonical_elements
from systolix.ir.postops import PostOp
from systolix.numerics import DataType


class LoweringError(AssertionError):
    """A handler lowered a node its own check should have refused: a bug, not a user error."""


@dataclass
class Ref:
    """A graph tensor as the lowering sees it: an activation, and which element is where.

    ``elements`` (shape = the ONNX shape) holds each element's id ``c * P + p`` in ``act``;
    ``canonical`` says whether it is exactly ``act`` as its own shape lays it out.
    """

    act: Activation
    shape: tuple[int, ...]
    elements: np.ndarray
    canonical: bool


def refusal(result) -> str | None:
    """A helper's result when it is the reason a node cannot run (a string), else None."""
    return result if isinstance(result, str) else None


def pair(v, default):
    """An ONNX 2-D attribute (kernel, strides, dilations) as a pair of ints."""
    if v is None:
        return default
    v = list(v)
    return (int(v[0]), int(v[1])) if len(v) >= 2 else (int(v[0]), int(v[0]))


class Lowering:
    """Lowers one graph (an accelerator segment) to layers, node by node."""

    def __init__(self, graph: Graph, array_size: int, data_type: DataType = DataType.FP16BP8, probes: dict | None = None,
                 tandem=None):
        self.g = graph
        self.N = array_size
        self.data_type = data_type
        self.tandem = tandem  # the architecture's Tandem vector unit (a TandemConfig, docs/tandem.md), or None
        self.refs: dict[str, Ref] = {}
        self.layers: list[Layer] = []
        self.consumers = graph.consumers()
        self.outputs = set(graph.outputs)
        self.unplaceable: dict[str, tuple[int, ...]] = {}
        self.perms: dict[str, list[int]] = {}
        self.inputs: dict[str, Activation] = {}
        # onnxruntime probes (resize weights) by node: a compile lowers a segment more than once
        self.probes = probes if probes is not None else {}
        # Outputs of nodes another node's handler lowered with its own (attention's scale and Softmax):
        # accepted and lowered as nothing.
        self.claimed: set[str] = set()
        # Attention's probabilities saved times 2^k for the context MatMul that reads them: tensor -> k.
        self.scaled: dict[str, int] = {}

    # --- support checks ----------------------------------------------------------------------
    def input_reason(self, node: Node, index: int = 0) -> str | None:
        """Why input ``index`` is not a tensor the accelerator has here, or None."""
        name = node.inputs[index]
        if name in self.refs:
            return None
        if self.g.const(name) is not None:
            return f"input {name!r} is a constant where a computed tensor is expected"
        if name in self.unplaceable:
            return (f"input {name!r} of shape {list(self.unplaceable[name])} cannot be laid out on the accelerator"
                    " (it holds tensors of batch 1: NCHW, [1, M, K], [M, K] or vectors)")
        return f"input {name!r} is not available on the accelerator"

    def activation_reason(self, node: Node, index: int = 0) -> str | None:
        """``input_reason``, and whether the tensor can be laid out as its own shape says."""
        reason = self.input_reason(node, index)
        if reason is None:
            r = self.refs[node.inputs[index]]
            if not r.canonical and canonical_chw(r.shape) is None:
                return (f"input shape {list(r.shape)} cannot be laid out on the accelerator"
                        " (it holds tensors of batch 1: NCHW, [1, M, K], [M, K] or vectors)")
        return reason

    def const_reason(self, node: Node, index: int, what: str) -> str | None:
        name = node.inputs[index] if index < len(node.inputs) else ""
        if (self.g.const(name) if name else None) is None:
            return f"{what} ({name!r}) is computed, not a constant; the accelerator needs it as a constant when compiling"
        return None

    def optional_const_reason(self, node: Node, index: int, what: str) -> str | None:
        """An optional input given but not constant."""
        if len(node.inputs) > index and node.inputs[index] and self.opt_const(node, index) is None:
            return what
        return None

    def output_reason(self, name: str) -> str | None:
        """Why a tensor the segment hands on cannot be laid out in DRAM0, or None."""
        r = self.refs.get(name)
        if r is None or r.canonical or self.nhwc_identity(r) or canonical_chw(r.shape) is not None:
            return None
        return (f"input shape {list(r.shape)} cannot be laid out on the accelerator"
                " (it holds tensors of batch 1: NCHW, [1, M, K], [M, K] or vectors)")

    # --- helpers ---------------------------------------------------------------------------------
    def new_act(self, name: str, C: int, H: int, W: int) -> Activation:
        return Activation(name, C, H, W, self.N)

    def const(self, node: Node, index: int) -> np.ndarray:
        """A constant input the handler's check accepted."""
        v = self.g.const(node.inputs[index])
        if v is None:
            raise LoweringError(f"{node.describe()}: input {index} is not a constant")
        return np.asarray(v)

    def opt_const(self, node: Node, index: int) -> np.ndarray | None:
        name = node.inputs[index] if index < len(node.inputs) else ""
        return None if not name else self.g.const(name)

    def ref(self, node: Node, index: int = 0) -> Ref:
        r = self.refs.get(node.inputs[index])
        if r is None:
            raise LoweringError(f"{node.describe()}: {self.input_reason(node, index)}")
        return r

    def act_of(self, node: Node, index: int = 0) -> Activation:
        """The input as an activation laid out as its own shape says (materialising a view)."""
        r = self.ref(node, index)
        if r.canonical:
            return r.act
        return self.materialise(node, r, node.inputs[index])

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.g.tensor(name).shape)

    def bind(self, name: str, act: Activation, shape: tuple[int, ...] | None = None) -> Ref:
        shape = self.shape(name) if shape is None else shape
        r = Ref(act, shape, canonical_elements(shape), True)
        self.refs[name] = r
        return r

    def add(self, layer: Layer, out_name: str | None = None) -> None:
        """Append ``layer``; with ``out_name``, bind that tensor to the layer's output."""
        self.layers.append(layer)
        if out_name is not None:
            self.bind(out_name, layer.output)

    def post_op_layer(self, node: Node, x: Activation, post: PostOp, diagonal: float = 1.0) -> None:
        """The node's output is ``x`` (times ``diagonal``) then ``post``: a layer of its own that
        fusion may join to the layer computing ``x``."""
        out = self.new_act(node.outputs[0], x.C, x.H, x.W)
        w = np.full((x.C, 1, 1), diagonal, np.float32)
        self.add(ConvLayer(node.name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), (1, 1), post_ops=[post],
                           ops=[node.op_type], nodes=[node.name]), node.outputs[0])

    def materialise(self, node: Node, r: Ref, tensor: str | None = None) -> Activation:
        """A view laid out as its own shape wants: a remap layer when only pixels move, a
        shuffle through the array when channels move too."""
        src = r.act
        shape = r.shape
        chw = canonical_chw(shape)
        if chw is None:
            raise LoweringError(f"{node.describe()}: shape {list(shape)} cannot be laid out")
        C, H, W, _ = chw
        canon = canonical_elements(shape).reshape(-1)
        # target element id -> source element id
        mapping = np.empty(C * H * W, dtype=np.int64)
        mapping[canon] = r.elements.reshape(-1)
        tc, _ = np.divmod(np.arange(C * H * W), H * W)
        sc, sp = np.divmod(mapping, src.P)
        out = self.new_act(f"{tensor or node.inputs[0]}:materialised", C, H, W)
        per_pixel = sp.reshape(C, H * W)
        if C == src.C and np.array_equal(sc, tc) and np.all(per_pixel == per_pixel[0:1]):
            # Only pixels move: plain data movement.
            source = np.stack(np.divmod(per_pixel[0], src.W), axis=-1).reshape(H, W, 2)
            self.layers.append(RemapLayer(f"{node.name}/relayout", src, out, source, ops=["Relayout"], nodes=[node.name]))
        else:
            # Channels move between vectors: through the array, one element at a time.
            self.layers.append(ShuffleLayer(f"{node.name}/relayout", src, out, mapping.reshape(C, H * W), ops=["Relayout"], nodes=[node.name]))
        self.refs[tensor or node.inputs[0]] = Ref(out, shape, canonical_elements(shape), True)
        return out

    def channel_vector(self, value: np.ndarray, r: Ref) -> np.ndarray | None:
        """A constant that broadcasts to the tensor as one value per channel, or None."""
        value = np.asarray(value, np.float32)
        try:
            full = np.broadcast_to(value, r.shape)
        except ValueError:
            return None
        if value.ndim > len(r.shape):
            return None
        per_elem = np.empty(r.act.C * r.act.P, np.float32)
        per_elem[r.elements.reshape(-1)] = full.reshape(-1)
        per_elem = per_elem.reshape(r.act.C, r.act.P)
        if not np.all(per_elem == per_elem[:, :1]):
            return None
        return per_elem[:, 0].copy()

    def pads(self, node: Node, H: int, W: int, k, stride, dil) -> tuple[tuple[int, int, int, int] | None, str | None]:
        """``(top, left, bottom, right)`` from ``pads``/``auto_pad``, or ``(None, reason)``."""
        auto = node.attr("auto_pad", "NOTSET")
        if auto in ("NOTSET", "", None):
            p = node.attr("pads")
            if p is None:
                return (0, 0, 0, 0), None
            p = [int(v) for v in p]
            if len(p) != 4:
                return None, f"pads {p} are not 2-D"
            if min(p) < 0:
                return None, f"negative pads {p}"
            return (p[0], p[1], p[2], p[3]), None
        if auto == "VALID":
            return (0, 0, 0, 0), None
        out = []
        for size, kk, s, d in ((H, k[0], stride[0], dil[0]), (W, k[1], stride[1], dil[1])):
            total = max((math.ceil(size / s) - 1) * s + (kk - 1) * d + 1 - size, 0)
            small = total // 2
            out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return (out[0][0], out[1][0], out[0][1], out[1][1]), None

    def window(self, node: Node, x: Activation, kernel: tuple[int, int]):
        """``(stride, dilation, pads, reason)`` of a 2-D window op (conv, pool) over ``x``; pads
        None and the reason when they cannot run."""
        stride = pair(node.attr("strides"), (1, 1))
        dil = pair(node.attr("dilations"), (1, 1))
        pads, reason = self.pads(node, x.H, x.W, kernel, stride, dil)
        return stride, dil, pads, reason

    def input_activation(self, node: Node, index: int = 0) -> Activation:
        """The activation an input will have once laid out as its shape says, without making
        the layers that lay it out (for checks that need its size)."""
        r = self.refs[node.inputs[index]]
        if r.canonical:
            return r.act
        C, H, W, _ = canonical_chw(r.shape)
        return self.new_act(node.inputs[index], C, H, W)

    def producer_layer(self, act: Activation) -> Layer | None:
        for layer in self.layers:
            if layer.output is act:
                return layer
        return None

    # --- the walk ------------------------------------------------------------------------------
    def begin(self) -> None:
        """Bind the graph's inputs: pixel-major in DRAM0, as the driver writes them."""
        for name in self.g.inputs:
            shape = self.shape(name)
            chw = canonical_chw(shape)
            if chw is None:
                # Only a reason to refuse a node that needs it as an activation (``input_reason``).
                self.unplaceable[name] = shape
                continue
            users = self.consumers.get(name, [])
            if len(shape) == 4 and shape[0] == 1 and users and all(
                    u.op_type == "Transpose" and list(u.attr("perm") or []) == [0, 3, 1, 2] for u in users):
                # An NHWC input that the model transposes to NCHW: keep it channels-last in DRAM
                # (its layout is the identity permutation), so the Transpose is a relabelling.
                _, H, W, C = shape
                act = self.new_act(name, C, H, W)
                act.order = "pixel"
                self.inputs[name] = act
                nhwc = canonical_elements((1, C, H, W)).transpose(0, 2, 3, 1)
                self.refs[name] = Ref(act, tuple(shape), nhwc, False)
                self.perms[name] = [0, 1, 2, 3]
                continue
            act = self.new_act(name, *chw[:3])
            act.order = "pixel"
            self.inputs[name] = act
            self.bind(name, act)

    @staticmethod
    def nhwc_identity(r: Ref) -> bool:
        """The tensor is an NCHW activation's elements in NHWC order (a model ending NCHW -> NHWC)."""
        a = r.act
        nhwc = canonical_elements((1, a.C, a.H, a.W)).transpose(0, 2, 3, 1)
        return r.elements.shape == nhwc.shape and bool(np.array_equal(r.elements, nhwc))

    def finish(self) -> HirProgram:
        """The program: each output laid out pixel-major in a tensor of its own."""
        g = self.g
        producers = g.producers()
        outputs = {}
        used_roots: set[int] = set()
        for name in g.outputs:
            if name not in self.refs:
                raise SystolixError(f"output {name!r} is not computed by any node")
            r = self.refs[name]
            if not r.canonical:
                if self.nhwc_identity(r):
                    # The model ends with NCHW -> NHWC: store channels-last, identity layout.
                    self.perms[name] = [0, 1, 2, 3]
                else:
                    self.materialise(producers[name], r, name)
                    r = self.refs[name]
            act = r.act
            if act.parent is not None or act in self.inputs.values() or id(act) in used_roots:
                act = self.copy_of(act, name)
            act.order = "pixel"
            act.name = name
            used_roots.add(id(act))
            outputs[name] = act
        return HirProgram(g.name, self.N, list(self.layers), dict(self.inputs), outputs,
                          {n: self.shape(n) for n in g.inputs if n in self.inputs}, {n: self.shape(n) for n in g.outputs},
                          dict(self.perms))

    def copy_of(self, act: Activation, name: str) -> Activation:
        out = self.new_act(name, act.C, act.H, act.W)
        w = np.ones((act.C, 1, 1), np.float32)
        self.layers.append(ConvLayer(f"{name}/copy", [ConvInput(act, diagonal=w)], out, np.zeros(act.C, np.float32), (1, 1),
                                     ops=["Copy"], nodes=[], open=False))
        return out
