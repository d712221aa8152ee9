"""Graph IR to layers (HIR): each ONNX node becomes a layer or joins the layer before it.

Fusion follows the seed: a layer is a matrix multiplication and the accumulator operations
after it, ending with a save. A node joins the open layer that produced its input when that
input has no other consumer and is not a model output:

* BatchNormalization, and Add/Sub/Mul/Div by a per-channel or scalar constant, fold into the
  layer's weights and bias (in float, before quantisation) while it has no accumulator
  operations yet; otherwise they become a depthwise 1x1 layer of their own;
* Relu, Clip, LeakyRelu, PRelu and adding another tensor become accumulator operations.

Reshape, Flatten, Squeeze, Unsqueeze and Transpose relabel an activation when the channels and
the pixel order stay put; otherwise they produce a *view* that a Gemm/MatMul consumes by
permuting its weight rows, or that a pixel remap materialises when only pixels move.
Anything else raises ``Unsupported`` naming the node, which the partitioner turns into a host
segment (or an error with ``--no-host``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from systolix.errors import SystolixError
from systolix.ir import Graph, Node
from systolix.numerics import DataType
from systolix.scheduler.hir import (
    Activation,
    ConvInput,
    ConvLayer,
    HirProgram,
    MaxPoolLayer,
    PixelMixLayer,
    PostOp,
    RemapLayer,
    ShuffleLayer,
)


class Unsupported(SystolixError):
    """A node the accelerator cannot run (in this context)."""

    def __init__(self, node: Node, reason: str):
        super().__init__(f"node {node.name!r} (op {node.op_type}) cannot run on the accelerator: {reason}")
        self.node = node
        self.reason = reason


def canonical_chw(shape: tuple[int, ...]) -> tuple[int, int, int, list[int]] | None:
    """How an ONNX shape sits in memory: ``(C, H, W, perm)``; None for shapes we cannot place.

    NCHW tensors keep channels in vectors; ``[1, K]``/``[M, K]``/``[1, M, K]`` spread the last
    axis across vectors and count the rest as pixels.
    """
    r = len(shape)
    if r == 4 and shape[0] == 1:
        return shape[1], shape[2], shape[3], [0, 2, 3, 1]
    if r == 3 and shape[0] == 1:
        return shape[2], 1, shape[1], [0, 1, 2]
    if r == 2:
        return shape[1], 1, shape[0], [0, 1]
    if r == 1:
        return shape[0], 1, 1, [0]
    return None


def canonical_elements(shape: tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor of ``shape`` (C order), its element id ``c * P + p`` in memory."""
    c, h, w, perm = canonical_chw(shape)
    ids = np.arange(c * h * w, dtype=np.int64).reshape(c, h * w)  # [c, p]
    r = len(shape)
    if r == 4:
        return ids.reshape(shape)
    if r in (2, 3):
        # [.., M, K]: element (m, k) is channel k of pixel m.
        return ids.T.reshape(shape)
    return ids.reshape(shape)


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


def _pair(v, default):
    if v is None:
        return default
    v = list(v)
    return (int(v[0]), int(v[1])) if len(v) >= 2 else (int(v[0]), int(v[0]))


class Lowering:
    """Lowers one graph to an ``HirProgram``; see the module docstring."""

    def __init__(self, graph: Graph, array_size: int, const_values: dict | None = None,
                 data_type: DataType = DataType.FP16BP8):
        self.g = graph
        self.N = array_size
        self.data_type = data_type
        self.refs: dict[str, Ref] = {}
        self.layers: list = []
        self.open: dict[str, ConvLayer] = {}
        self.consumers = graph.consumers()
        self.outputs = set(graph.outputs)
        self.placement: dict[str, str] = {}
        self._names: set[str] = set()
        self.unplaceable: dict[str, tuple[int, ...]] = {}
        self.perms: dict[str, list[int]] = {}

    # --- helpers ---------------------------------------------------------------------
    def new_act(self, name: str, C: int, H: int, W: int) -> Activation:
        return Activation(name, C, H, W, self.N)

    def const(self, node: Node, index: int, what: str) -> np.ndarray:
        name = node.inputs[index] if index < len(node.inputs) else ""
        v = self.g.const(name) if name else None
        if v is None:
            raise Unsupported(node, f"{what} ({name!r}) is not a constant")
        return np.asarray(v)

    def opt_const(self, node: Node, index: int) -> np.ndarray | None:
        name = node.inputs[index] if index < len(node.inputs) else ""
        return None if not name else self.g.const(name)

    def ref(self, node: Node, index: int = 0) -> Ref:
        name = node.inputs[index]
        if name in self.refs:
            return self.refs[name]
        if self.g.const(name) is not None:
            raise Unsupported(node, f"input {name!r} is a constant where a computed tensor is expected")
        if name in self.unplaceable:
            raise Unsupported(node, f"input {name!r} of shape {list(self.unplaceable[name])} cannot be laid out on the accelerator")
        raise Unsupported(node, f"input {name!r} is not available on the accelerator")

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

    def single_use(self, tensor: str) -> bool:
        return len(self.consumers.get(tensor, [])) == 1 and tensor not in self.outputs

    def open_layer(self, tensor: str) -> ConvLayer | None:
        layer = self.open.get(tensor)
        if layer is None or not self.single_use(tensor):
            return None
        if layer.output.parent is not None or self.refs[tensor].act is not layer.output:
            return None
        return layer

    def extend(self, layer: ConvLayer, node: Node) -> None:
        """``node`` joins ``layer``: the layer's output becomes the node's output."""
        out = node.outputs[0]
        layer.output.name = out
        layer.ops.append(node.op_type)
        layer.nodes.append(node.name)
        for key in [k for k, v in self.open.items() if v is layer]:
            del self.open[key]
        self.open[out] = layer
        self.bind(out, layer.output)

    def add_layer(self, layer, node: Node | None, out_name: str | None = None) -> None:
        self.layers.append(layer)
        if isinstance(layer, ConvLayer) and out_name is not None:
            self.open[out_name] = layer

    def materialise(self, node: Node, r: Ref, tensor: str | None = None) -> Activation:
        """A view laid out as its own shape wants: a remap layer when only pixels move, a
        shuffle through the array when channels move too."""
        src = r.act
        shape = r.shape
        chw = canonical_chw(shape)
        if chw is None:
            raise Unsupported(node, f"input shape {list(shape)} cannot be laid out on the accelerator")
        C, H, W, _ = chw
        canon = canonical_elements(shape).reshape(-1)
        # target element id -> source element id
        mapping = np.empty(C * H * W, dtype=np.int64)
        mapping[canon] = r.elements.reshape(-1)
        tc, tp = np.divmod(np.arange(C * H * W), H * W)
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

    # --- the walk --------------------------------------------------------------------
    def run(self) -> HirProgram:
        g = self.g
        inputs = {}
        for name in g.inputs:
            shape = self.shape(name)
            chw = canonical_chw(shape)
            if chw is None:
                # Only an error if a node needs it as an activation (see ``ref``).
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
                inputs[name] = act
                nhwc = canonical_elements((1, C, H, W)).transpose(0, 2, 3, 1)
                self.refs[name] = Ref(act, tuple(shape), nhwc, False)
                self.perms[name] = [0, 1, 2, 3]
                continue
            act = self.new_act(name, *chw[:3])
            act.order = "pixel"
            inputs[name] = act
            self.bind(name, act)
        for node in g.nodes:
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise Unsupported(node, "the accelerator has no implementation of this op")
            handler(node)
            self.placement[node.name] = "accelerator"
        outputs = {}
        used_roots: set[int] = set()
        for name in g.outputs:
            if name not in self.refs:
                raise SystolixError(f"output {name!r} is not computed by any node")
            r = self.refs[name]
            if not r.canonical:
                a = r.act
                nhwc = canonical_elements((1, a.C, a.H, a.W)).transpose(0, 2, 3, 1)
                if r.elements.shape == nhwc.shape and np.array_equal(r.elements, nhwc):
                    # The model ends with NCHW -> NHWC: store channels-last, identity layout.
                    self.perms[name] = [0, 1, 2, 3]
                else:
                    self.materialise(g.producers()[name], r, name)
                    r = self.refs[name]
            act = r.act
            if act.parent is not None or act in inputs.values() or id(act) in used_roots:
                act = self.copy_of(act, name)
            act.order = "pixel"
            act.name = name
            used_roots.add(id(act))
            outputs[name] = act
        layers = self.eliminate_dead(outputs)
        return HirProgram(
            g.name, self.N, layers, inputs, outputs,
            {n: self.shape(n) for n in g.inputs if n in inputs}, {n: self.shape(n) for n in g.outputs}, dict(self.placement),
            dict(self.perms),
        )

    def copy_of(self, act: Activation, name: str) -> Activation:
        out = self.new_act(name, act.C, act.H, act.W)
        w = np.ones((act.C, 1, 1), np.float32)
        self.layers.append(ConvLayer(f"{name}/copy", [ConvInput(act, diagonal=w)], out, np.zeros(act.C, np.float32), (1, 1), ops=["Copy"], nodes=[]))
        return out

    def eliminate_dead(self, outputs: dict[str, Activation]) -> list:
        """Drop layers whose results nobody reads (e.g. a Dropout mask), last to first."""
        live_roots = {id(a.root()[0]) for a in outputs.values()}
        kept = []
        for layer in reversed(self.layers):
            if id(layer.output.root()[0]) in live_roots:
                kept.append(layer)
                for a in layer.reads():
                    live_roots.add(id(a.root()[0]))
        return list(reversed(kept))

    # --- ops: linear layers ------------------------------------------------------------
    def op_Conv(self, node: Node) -> None:
        x = self.act_of(node, 0)
        w = self.const(node, 1, "weights")
        if w.ndim != 4:
            raise Unsupported(node, f"only 2-D convolutions are supported (weights have {w.ndim} axes)")
        b = self.opt_const(node, 2)
        if len(node.inputs) > 2 and node.inputs[2] and b is None:
            raise Unsupported(node, "bias is not a constant")
        cout, cin_g, kh, kw = w.shape
        group = int(node.attr("group", 1))
        if cin_g * group != x.C:
            raise SystolixError(f"{node.describe()}: weights expect {cin_g * group} input channels, the input has {x.C}")
        stride = _pair(node.attr("strides"), (1, 1))
        dil = _pair(node.attr("dilations"), (1, 1))
        pads = self.pads(node, x.H, x.W, (kh, kw), stride, dil)
        out_shape = self.shape(node.outputs[0])
        oh = (x.H + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // stride[0] + 1
        ow = (x.W + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // stride[1] + 1
        if tuple(out_shape) != (1, cout, oh, ow):
            raise Unsupported(node, f"output shape {list(out_shape)} differs from the expected {[1, cout, oh, ow]}")
        if group == x.C == cout:
            conv_in = ConvInput(x, diagonal=w[:, 0].astype(np.float32))
        else:
            dense = np.zeros((cout, x.C, kh, kw), np.float32)
            co_g = cout // group
            for gidx in range(group):
                dense[gidx * co_g:(gidx + 1) * co_g, gidx * cin_g:(gidx + 1) * cin_g] = w[gidx * co_g:(gidx + 1) * co_g]
            conv_in = ConvInput(x, dense)
        bias = np.zeros(cout, np.float32) if b is None else b.astype(np.float32).reshape(cout)
        out = self.new_act(node.outputs[0], cout, oh, ow)
        layer = ConvLayer(node.name, [conv_in], out, bias, (kh, kw), stride, dil, pads, ops=["Conv"], nodes=[node.name],
                          macs=int(cout * oh * ow * cin_g * kh * kw))
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def pads(self, node: Node, H: int, W: int, k, stride, dil) -> tuple[int, int, int, int]:
        auto = node.attr("auto_pad", "NOTSET")
        if auto in ("NOTSET", "", None):
            p = node.attr("pads")
            if p is None:
                return (0, 0, 0, 0)
            p = [int(v) for v in p]
            if len(p) != 4:
                raise Unsupported(node, f"pads {p} are not 2-D")
            if min(p) < 0:
                raise Unsupported(node, f"negative pads {p}")
            return (p[0], p[1], p[2], p[3])
        if auto == "VALID":
            return (0, 0, 0, 0)
        out = []
        for size, kk, s, d in ((H, k[0], stride[0], dil[0]), (W, k[1], stride[1], dil[1])):
            total = max((math.ceil(size / s) - 1) * s + (kk - 1) * d + 1 - size, 0)
            small = total // 2
            out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return (out[0][0], out[1][0], out[0][1], out[1][1])

    def dense_layer(self, node: Node, a_index: int, bmat: np.ndarray, bias: np.ndarray, op: str) -> None:
        """``y = x @ bmat + bias`` where x is input ``a_index`` (a vector, or rows of pixels)."""
        r = self.ref(node, a_index)
        K, O = bmat.shape
        if r.shape[-1] != K:
            raise SystolixError(f"{node.describe()}: input has {r.shape[-1]} features, the weights {K}")
        out_shape = self.shape(node.outputs[0])
        rows = int(np.prod(r.shape[:-1], dtype=np.int64))
        act = r.act
        if rows == 1:
            # One output vector: a convolution whose kernel covers the whole input tensor, with
            # each weight row placed where the input's element sits in memory.
            inv = np.full(act.C * act.P, -1, np.int64)
            inv[r.elements.reshape(-1)] = np.arange(K)
            dense = np.zeros((O, act.C, act.H, act.W), np.float32)
            rows_of = inv.reshape(act.C, act.H, act.W)
            valid = rows_of >= 0
            dense[:, valid] = bmat[rows_of[valid]].T
            out = self.new_act(node.outputs[0], O, 1, 1)
            layer = ConvLayer(node.name, [ConvInput(act, dense)], out, bias.astype(np.float32), (act.H, act.W), ops=[op], nodes=[node.name], macs=int(K * O))
        else:
            if not r.canonical:
                raise Unsupported(node, "a batched matrix product over a reshaped input")
            dense = bmat.T.astype(np.float32).reshape(O, K, 1, 1)
            chw = canonical_chw(tuple(out_shape))
            if chw is None or chw[1] * chw[2] != act.P:
                raise Unsupported(node, f"output shape {list(out_shape)} cannot be laid out on the accelerator")
            out = self.new_act(node.outputs[0], O, act.H, act.W)
            layer = ConvLayer(node.name, [ConvInput(act, dense)], out, bias.astype(np.float32), (1, 1), ops=[op], nodes=[node.name], macs=int(rows * K * O))
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def op_Gemm(self, node: Node) -> None:
        if int(node.attr("transA", 0)):
            raise Unsupported(node, "transA=1")
        b = self.const(node, 1, "B").astype(np.float32)
        if int(node.attr("transB", 0)):
            b = b.T
        alpha = float(node.attr("alpha", 1.0))
        beta = float(node.attr("beta", 1.0))
        O = b.shape[1]
        c = self.opt_const(node, 2)
        if len(node.inputs) > 2 and node.inputs[2] and c is None:
            raise Unsupported(node, "C is not a constant")
        full_c = None
        if c is None:
            bias = np.zeros(O, np.float32)
        elif np.asarray(c).size in (1, O):
            bias = beta * np.broadcast_to(np.asarray(c, np.float32), (1, O)).reshape(O)
        else:
            # A C matrix with a row per input row: added from DRAM1 after the product.
            bias = np.zeros(O, np.float32)
            full_c = beta * np.broadcast_to(np.asarray(c, np.float32), tuple(self.shape(node.outputs[0])))
        self.dense_layer(node, 0, alpha * b, bias, "Gemm")
        if full_c is not None:
            layer = self.layers[-1]
            out = layer.output
            layer.post_ops.append(PostOp("add_const", values=full_c.T.reshape(out.C, out.H, out.W).astype(np.float32), node=node.name))

    def op_MatMul(self, node: Node) -> None:
        b = self.opt_const(node, 1)
        a = self.opt_const(node, 0)
        if b is None and a is not None and np.ndim(a) == 2 and len(self.ref(node, 1).shape) == 2:
            # const (M, K) @ x (K, J): rows of x are pixels, so this mixes pixels: y[m] = sum_k a[m, k] x[k].
            x = self.act_of(node, 1)
            M_, K = a.shape
            out = self.new_act(node.outputs[0], x.C, 1, M_)
            mm, kk = np.nonzero(a)
            self.layers.append(PixelMixLayer(node.name, x, out, mm, kk, a[mm, kk].astype(np.float32), ops=["MatMul"], nodes=[node.name],
                                             macs=int(M_ * K * x.C)))
            self.bind(node.outputs[0], out)
            return
        if b is None:
            raise Unsupported(node, "only a MatMul with a constant operand runs on the accelerator")
        b = np.asarray(b, np.float32)
        if b.ndim != 2:
            raise Unsupported(node, f"constant operand has {b.ndim} axes (2 supported)")
        self.dense_layer(node, 0, b, np.zeros(b.shape[1], np.float32), "MatMul")

    # --- per-channel affine: folded, or a depthwise 1x1 layer ---------------------------------
    def channel_vector(self, node: Node, value: np.ndarray, r: Ref) -> np.ndarray | None:
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

    def affine(self, node: Node, x_index: int, scale: np.ndarray, shift: np.ndarray, op: str) -> None:
        """``y = x * scale + shift`` per channel."""
        name = node.inputs[x_index]
        r = self.ref(node, x_index)
        if not r.canonical:
            r = self.bind(name, self.act_of(node, x_index))
        out_shape = self.shape(node.outputs[0])
        if tuple(out_shape) != tuple(r.shape):
            raise Unsupported(node, f"broadcasting the tensor from {list(r.shape)} to {list(out_shape)}")
        layer = self.open_layer(name)
        if layer is not None and not layer.post_ops:
            for inp in layer.inputs:
                inp.scaled(scale)
            layer.bias = layer.bias * scale + shift
            self.extend(layer, node)
            return
        act = r.act
        w = np.asarray(scale, np.float32).reshape(act.C, 1, 1)
        out = self.new_act(node.outputs[0], act.C, act.H, act.W)
        layer = ConvLayer(node.name, [ConvInput(act, diagonal=w)], out, shift.astype(np.float32), (1, 1), ops=[op], nodes=[node.name])
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def op_BatchNormalization(self, node: Node) -> None:
        if len([o for o in node.outputs if o]) > 1:
            raise Unsupported(node, "training-mode outputs")
        scale = self.const(node, 1, "scale").astype(np.float64)
        bias = self.const(node, 2, "B").astype(np.float64)
        mean = self.const(node, 3, "mean").astype(np.float64)
        var = self.const(node, 4, "var").astype(np.float64)
        eps = float(node.attr("epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        t = bias - mean * s
        r = self.ref(node, 0)
        if r.act.C != s.size:
            raise Unsupported(node, "normalises an axis that is not the channel axis")
        self.affine(node, 0, s.astype(np.float32), t.astype(np.float32), "BatchNormalization")

    def _binary(self, node: Node, kind: str) -> None:
        a, b = node.inputs[0], node.inputs[1]
        ca, cb = self.g.const(a), self.g.const(b)
        if ca is not None and cb is not None:
            raise Unsupported(node, "both operands are constants")  # folded by the frontend normally
        if ca is None and cb is None:
            ra, rb = self.ref(node, 0), self.ref(node, 1)
            out_shape = tuple(self.shape(node.outputs[0]))
            if kind in ("Add", "Mul") and tuple(ra.shape) != tuple(rb.shape):
                return self.broadcast_tensors(node, kind)
            if kind == "Add":
                return self.add_tensors(node, 0, 1, 1.0)
            if kind == "Sub":
                return self.add_tensors(node, 0, 1, -1.0)
            if kind == "Mul" and tuple(ra.shape) == tuple(rb.shape) == out_shape:
                return self.tensor_post_op(node, 0, 1, "mul_tensor")
            raise Unsupported(node, f"{kind} of two computed tensors")
        xi = 0 if ca is None else 1
        c = cb if ca is None else ca
        r = self.ref(node, xi)
        vec = self.channel_vector(node, c, r)
        if vec is None and kind in ("Add", "Sub") and not (kind == "Sub" and xi == 1):
            return self.add_constant_tensor(node, xi, np.asarray(c, np.float32) * (1.0 if kind == "Add" else -1.0))
        if vec is None:
            raise Unsupported(node, f"constant of shape {list(np.shape(c))} is not per-channel or scalar")
        ones = np.ones_like(vec)
        zeros = np.zeros_like(vec)
        if kind == "Add":
            self.affine(node, xi, ones, vec, kind)
        elif kind == "Sub":
            if xi == 0:
                self.affine(node, xi, ones, -vec, kind)
            else:
                self.affine(node, xi, -ones, vec, kind)
        elif kind == "Mul":
            self.affine(node, xi, vec, zeros, kind)
        elif kind == "Div":
            if xi != 0:
                raise Unsupported(node, "dividing a constant by a tensor")
            if np.any(vec == 0):
                raise Unsupported(node, "division by zero")
            self.affine(node, xi, 1.0 / vec, zeros, kind)

    def op_Add(self, node: Node) -> None:
        self._binary(node, "Add")

    def op_Sub(self, node: Node) -> None:
        self._binary(node, "Sub")

    def op_Mul(self, node: Node) -> None:
        self._binary(node, "Mul")

    def op_Div(self, node: Node) -> None:
        self._binary(node, "Div")

    def add_tensors(self, node: Node, i: int, j: int, sign_j: float) -> None:
        """``out = in_i + sign_j * in_j``: an accumulator add after the layer producing one side."""
        ra, rb = self.ref(node, i), self.ref(node, j)
        out_shape = tuple(self.shape(node.outputs[0]))
        if tuple(ra.shape) != out_shape or tuple(rb.shape) != out_shape:
            raise Unsupported(node, f"broadcasting {list(ra.shape)} and {list(rb.shape)}")
        a = self.act_of(node, i)
        b = self.act_of(node, j)
        if sign_j > 0:
            # Prefer to extend the layer that produced the later operand.
            for mine, other, name in ((a, b, node.inputs[i]), (b, a, node.inputs[j])):
                layer = self.open_layer(name)
                # The other operand must be complete before this layer runs.
                if layer is not None and other is not mine and self.written_before(other, layer):
                    layer.post_ops.append(PostOp("add", tensor=other, node=node.name))
                    self.extend(layer, node)
                    return
            base, addend = a, b
            w = np.ones((a.C, 1, 1), np.float32)
        else:
            base, addend = b, a  # -b + a
            w = -np.ones((a.C, 1, 1), np.float32)
        out = self.new_act(node.outputs[0], a.C, a.H, a.W)
        layer = ConvLayer(node.name, [ConvInput(base, diagonal=w)], out, np.zeros(a.C, np.float32), (1, 1),
                          post_ops=[PostOp("add", tensor=addend, node=node.name)], ops=[node.op_type], nodes=[node.name])
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def add_constant_tensor(self, node: Node, xi: int, c: np.ndarray) -> None:
        """``x + c`` for a constant that varies over pixels: added from DRAM1 into the accumulators."""
        r = self.ref(node, xi)
        out_shape = tuple(self.shape(node.outputs[0]))
        if tuple(r.shape) != out_shape:
            raise Unsupported(node, f"broadcasting the tensor from {list(r.shape)} to {list(out_shape)}")
        x = self.act_of(node, xi)
        full = np.broadcast_to(c, r.shape).reshape(-1)
        values = np.empty(x.C * x.P, np.float32)
        values[self.refs[node.inputs[xi]].elements.reshape(-1)] = full
        self.add_values(node, x, node.inputs[xi], values.reshape(x.C, x.H, x.W))

    def add_values(self, node: Node, x: Activation, name: str, values: np.ndarray) -> None:
        post = PostOp("add_const", values=values, node=node.name)
        layer = self.open_layer(name)
        if layer is not None:
            layer.post_ops.append(post)
            self.extend(layer, node)
            return
        out = self.new_act(node.outputs[0], x.C, x.H, x.W)
        layer = ConvLayer(node.name, [ConvInput(x, diagonal=np.ones((x.C, 1, 1), np.float32))], out, np.zeros(x.C, np.float32), (1, 1),
                          post_ops=[post], ops=[node.op_type], nodes=[node.name])
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def broadcast_tensors(self, node: Node, kind: str) -> None:
        """``x + g`` / ``x * g`` where ``g`` is one value per channel (``[1, C, 1, 1]``)."""
        ra, rb = self.ref(node, 0), self.ref(node, 1)
        out_shape = tuple(self.shape(node.outputs[0]))
        for big, small in ((0, 1), (1, 0)):
            rbig, rsmall = (ra, rb) if big == 0 else (rb, ra)
            if tuple(rbig.shape) == out_shape and len(out_shape) == 4 and tuple(rsmall.shape) == (1, out_shape[1], 1, 1):
                return self.tensor_post_op(node, big, small, "add_bcast" if kind == "Add" else "mul_bcast")
        raise Unsupported(node, f"broadcasting {list(ra.shape)} and {list(rb.shape)}")

    def tensor_post_op(self, node: Node, i: int, j: int, kind: str) -> None:
        """An accumulator operation of input ``i`` with the whole tensor ``j`` (SIMD, register 1)."""
        a = self.act_of(node, i)
        b = self.act_of(node, j)
        for mine, other, name, k in ((a, b, node.inputs[i], kind), (b, a, node.inputs[j], kind)):
            if k.endswith("bcast") and mine is not a:
                continue  # the broadcast operand cannot be the layer's output
            layer = self.open_layer(name)
            if layer is not None and other is not mine and self.written_before(other, layer):
                layer.post_ops.append(PostOp(k, tensor=other, node=node.name))
                self.extend(layer, node)
                return
        w = np.ones((a.C, 1, 1), np.float32)
        out = self.new_act(node.outputs[0], a.C, a.H, a.W)
        layer = ConvLayer(node.name, [ConvInput(a, diagonal=w)], out, np.zeros(a.C, np.float32), (1, 1),
                          post_ops=[PostOp(kind, tensor=b, node=node.name)], ops=[node.op_type], nodes=[node.name])
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    # --- activations -----------------------------------------------------------------------
    def activation(self, node: Node, post: PostOp) -> None:
        name = node.inputs[0]
        x = self.act_of(node, 0)
        layer = self.open_layer(name)
        if layer is not None:
            layer.post_ops.append(post)
            self.extend(layer, node)
            return
        w = np.ones((x.C, 1, 1), np.float32)
        out = self.new_act(node.outputs[0], x.C, x.H, x.W)
        layer = ConvLayer(node.name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), (1, 1), post_ops=[post], ops=[node.op_type], nodes=[node.name])
        self.add_layer(layer, node, node.outputs[0])
        self.bind(node.outputs[0], out)

    def op_Relu(self, node: Node) -> None:
        self.activation(node, PostOp("relu", node=node.name))

    def op_Clip(self, node: Node) -> None:
        if self.g.opset < 11:
            lo, hi = node.attr("min", -np.inf), node.attr("max", np.inf)
        else:
            vlo, vhi = self.opt_const(node, 1), self.opt_const(node, 2)
            if (len(node.inputs) > 1 and node.inputs[1] and vlo is None) or (len(node.inputs) > 2 and node.inputs[2] and vhi is None):
                raise Unsupported(node, "min/max are not constants")
            lo = -np.inf if vlo is None else float(vlo)
            hi = np.inf if vhi is None else float(vhi)
        if lo == 0 and hi == np.inf:
            return self.activation(node, PostOp("relu", node=node.name))
        self.activation(node, PostOp("clip", lo=float(lo), hi=float(hi), node=node.name))

    def op_LeakyRelu(self, node: Node) -> None:
        alpha = float(node.attr("alpha", 0.01))
        x = self.ref(node, 0).act
        self.activation(node, PostOp("slope", values=np.full(x.C, alpha, np.float32), node=node.name))

    def op_PRelu(self, node: Node) -> None:
        slope = self.const(node, 1, "slope")
        r = self.ref(node, 0)
        vec = self.channel_vector(node, slope, r)
        if vec is None:
            raise Unsupported(node, f"slope of shape {list(slope.shape)} is not per-channel")
        if np.any(vec > 1) and np.any(vec <= 1):
            raise Unsupported(node, "slopes above 1 mixed with slopes below 1")
        self.activation(node, PostOp("slope", values=vec, node=node.name))

    # --- pooling ---------------------------------------------------------------------------
    def pool_geometry(self, node: Node, x: Activation):
        k = _pair(node.attr("kernel_shape"), None)
        if k is None or len(node.attr("kernel_shape")) != 2:
            raise Unsupported(node, "only 2-D pooling is supported")
        stride = _pair(node.attr("strides"), (1, 1))
        dil = _pair(node.attr("dilations"), (1, 1))
        pads = self.pads(node, x.H, x.W, k, stride, dil)
        out_shape = self.shape(node.outputs[0])
        return k, stride, dil, pads, out_shape

    def op_MaxPool(self, node: Node) -> None:
        if len(node.outputs) > 1 and node.outputs[1] and self.consumers.get(node.outputs[1]):
            raise Unsupported(node, "the Indices output")
        if int(node.attr("storage_order", 0)):
            raise Unsupported(node, "storage_order=1")
        x = self.act_of(node, 0)
        k, stride, dil, pads, out_shape = self.pool_geometry(node, x)
        out = self.new_act(node.outputs[0], x.C, out_shape[2], out_shape[3])
        self.layers.append(MaxPoolLayer(node.name, x, out, k, stride, dil, pads, ops=["MaxPool"], nodes=[node.name]))
        self.bind(node.outputs[0], out)

    def op_GlobalMaxPool(self, node: Node) -> None:
        x = self.act_of(node, 0)
        out = self.new_act(node.outputs[0], x.C, 1, 1)
        self.layers.append(MaxPoolLayer(node.name, x, out, (x.H, x.W), (1, 1), ops=["GlobalMaxPool"], nodes=[node.name]))
        self.bind(node.outputs[0], out)

    @staticmethod
    def pool_shift(taps: int) -> int:
        """The exponent of an average pool's weights ``2^-shift`` over ``taps`` values: the sum
        then holds 4 to 8x the mean."""
        return max(0, int(math.floor(math.log2(taps))) - 2)

    def average(self, node: Node, x: Activation, k, stride, dil, pads, OH, OW, include_pad: bool, op: str) -> None:
        top = self.data_type.binary_point if self.data_type.is_fixed else None
        if top is None or self.pool_shift(k[0] * k[1]) <= top:
            out = self.new_act(node.outputs[0], x.C, OH, OW)
            self.average_layer(node.name, node, x, out, k, stride, dil, pads, include_pad, op)
        else:
            # Weights under 2^-bp would round to nothing (a 64x64 global pool: 2^-10). The mean
            # is separable, counts included (each is a row count times a column count): average
            # along W, then along H, each pass with weights the type holds.
            if max(self.pool_shift(k[0]), self.pool_shift(k[1])) > top:
                limit = 1 << (top + 3)
                raise Unsupported(node, f"an average over {k[0]}x{k[1]} values: {self.data_type.name} averages at most "
                                        f"{limit - 1} along each axis")
            rows = self.new_act(f"{node.name}/rows", x.C, x.H, OW)
            self.average_layer(f"{node.name}/rows", node, x, rows, (1, k[1]), (1, stride[1]), (1, dil[1]),
                               (0, pads[1], 0, pads[3]), include_pad, op)
            out = self.new_act(node.outputs[0], x.C, OH, OW)
            self.average_layer(node.name, node, rows, out, (k[0], 1), (stride[0], 1), (dil[0], 1),
                               (pads[0], 0, pads[2], 0), include_pad, op)
        self.bind(node.outputs[0], out)

    def average_layer(self, name: str, node: Node, x: Activation, out: Activation, k, stride, dil, pads,
                      include_pad: bool, op: str) -> None:
        """One conv layer averaging ``x`` into ``out`` over windows ``k``."""
        # Sum with weights 2^-shift (exact scaling; keeps the running sum in range), then multiply
        # by 2^shift / count in two SIMD steps so the multiplier keeps 9 significant bits. The
        # accumulators hold 4 to 8x the mean, so a mean past 16 saturates; calibration lowers the
        # weights further for such data (negative gains, systolix.scheduler.precision).
        shift = self.pool_shift(k[0] * k[1])
        w = np.full((x.C, k[0], k[1]), 2.0 ** -shift, np.float32)
        counts = self.window_counts(x.H, x.W, k, stride, dil, pads, out.H, out.W, include_pad)
        factors = (2.0 ** shift) / counts
        post = []
        uniform = np.all(factors == factors.flat[0])
        m = int(np.clip(-np.floor(np.log2(factors.min())), 0, 6))
        if uniform:
            post.append(PostOp("mul", values=np.full(x.C, factors.flat[0] * 2 ** m, np.float32), node=node.name))
        else:
            post.append(PostOp("mul_pixel", values=(factors * 2 ** m).astype(np.float32), node=node.name))
        if m:
            post.append(PostOp("mul", values=np.full(x.C, 2.0 ** -m, np.float32), node=node.name))
        layer = ConvLayer(name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), k, stride, dil, pads,
                          post_ops=post, ops=[op], nodes=[node.name], scaling_ops=len(post))
        self.add_layer(layer, node, None)

    @staticmethod
    def window_counts(H, W, k, stride, dil, pads, OH, OW, include_pad):
        def axis(size, kk, s, d, p0, p1, n_out):
            starts = np.arange(n_out) * s - p0
            taps = starts[:, None] + np.arange(kk)[None, :] * d
            lo, hi = (-p0, size + p1) if include_pad else (0, size)
            return ((taps >= lo) & (taps < hi)).sum(axis=1)

        ch = axis(H, k[0], stride[0], dil[0], pads[0], pads[2], OH)
        cw = axis(W, k[1], stride[1], dil[1], pads[1], pads[3], OW)
        return (ch[:, None] * cw[None, :]).astype(np.float64)

    def op_AveragePool(self, node: Node) -> None:
        x = self.act_of(node, 0)
        k, stride, dil, pads, out_shape = self.pool_geometry(node, x)
        include = bool(int(node.attr("count_include_pad", 0)))
        self.average(node, x, k, stride, dil, pads, out_shape[2], out_shape[3], include, "AveragePool")

    def op_GlobalAveragePool(self, node: Node) -> None:
        x = self.act_of(node, 0)
        self.average(node, x, (x.H, x.W), (1, 1), (1, 1), (0, 0, 0, 0), 1, 1, True, "GlobalAveragePool")

    def op_ReduceMean(self, node: Node) -> None:
        x = self.act_of(node, 0)
        axes = node.attr("axes")
        if axes is None and len(node.inputs) > 1 and node.inputs[1]:
            axes = self.const(node, 1, "axes").tolist()
        if axes is None or sorted(int(a) % 4 for a in axes) != [2, 3] or len(self.ref(node, 0).shape) != 4:
            raise Unsupported(node, "only the mean over the spatial axes of an NCHW tensor")
        self.average(node, x, (x.H, x.W), (1, 1), (1, 1), (0, 0, 0, 0), 1, 1, True, "ReduceMean")
        if not int(node.attr("keepdims", 1)):
            self.bind(node.outputs[0], self.refs[node.outputs[0]].act)

    # --- data movement ---------------------------------------------------------------------
    def view(self, node: Node, elements: np.ndarray) -> None:
        """The node's output is the input's elements rearranged: relabel if memory agrees."""
        src = self.ref(node, 0)
        out_name = node.outputs[0]
        shape = tuple(self.shape(out_name))
        elements = elements.reshape(shape)
        chw = canonical_chw(shape)
        if chw is not None:
            C, H, W, _ = chw
            if C == src.act.C and H * W == src.act.P and np.array_equal(elements, canonical_elements(shape)):
                if (H, W) == (src.act.H, src.act.W):
                    act = src.act
                else:
                    act = Activation(out_name, C, H, W, self.N, parent=(src.act, 0))
                self.refs[out_name] = Ref(act, shape, elements, True)
                return
        self.refs[out_name] = Ref(src.act, shape, elements, False)

    def op_Identity(self, node: Node) -> None:
        self.refs[node.outputs[0]] = self.ref(node, 0)

    def op_Dropout(self, node: Node) -> None:
        if len(node.outputs) > 1 and node.outputs[1] and self.consumers.get(node.outputs[1]):
            raise Unsupported(node, "the mask output")
        self.refs[node.outputs[0]] = self.ref(node, 0)

    def op_Reshape(self, node: Node) -> None:
        self.view(node, self.ref(node, 0).elements)

    op_Flatten = op_Reshape
    op_Squeeze = op_Reshape
    op_Unsqueeze = op_Reshape

    def op_Transpose(self, node: Node) -> None:
        r = self.ref(node, 0)
        perm = node.attr("perm")
        perm = list(reversed(range(len(r.shape)))) if perm is None else [int(p) for p in perm]
        self.view(node, np.transpose(r.elements, perm))

    def channel_axis(self, node: Node, r: Ref, axis: int) -> bool:
        rank = len(r.shape)
        axis = axis % rank
        return (rank == 4 and axis == 1) or (rank in (1, 2, 3) and axis == rank - 1)

    def op_Concat(self, node: Node) -> None:
        axis = int(node.attr("axis"))
        refs = [self.ref(node, i) for i in range(len(node.inputs))]
        if not all(self.channel_axis(node, r, axis) for r in refs):
            raise Unsupported(node, f"concatenation on axis {axis} (only the channel axis runs on the accelerator)")
        acts = [self.act_of(node, i) for i in range(len(node.inputs))]
        H, W = acts[0].H, acts[0].W
        C = sum(a.C for a in acts)
        out = self.new_act(node.outputs[0], C, H, W)
        aligned = all(a.C % self.N == 0 for a in acts[:-1])
        aliasable = aligned and len({id(a) for a in acts}) == len(acts) and all(
            a.parent is None and a.order == "planar" and a.name not in self.g.inputs and self.producer_layer(a) is not None
            and a.name not in self.outputs for a in acts)
        if aliasable:
            g0 = 0
            for a in acts:
                a.parent = (out, g0)
                g0 += a.G
                # The producer keeps its layer but no longer takes more nodes into it.
                for k in [k for k, v in self.open.items() if v.output is a]:
                    del self.open[k]
            self.bind(node.outputs[0], out)
            self.placement[node.name] = "accelerator"
            return
        inputs = []
        c0 = 0
        for a in acts:
            w = np.zeros((C, a.C, 1, 1), np.float32)
            w[c0 + np.arange(a.C), np.arange(a.C)] = 1.0
            inputs.append(ConvInput(a, w))
            c0 += a.C
        layer = ConvLayer(node.name, inputs, out, np.zeros(C, np.float32), (1, 1), ops=["Concat"], nodes=[node.name])
        self.add_layer(layer, node, None)
        self.bind(node.outputs[0], out)

    def written_before(self, act: Activation, layer) -> bool:
        """Whether every layer writing ``act`` (or the tensor it is part of) comes before ``layer``."""
        pos = self.layers.index(layer)
        root = act.root()[0]
        return all(k < pos for k, other in enumerate(self.layers)
                   if other.output.root()[0] is root or other.output is act)

    def producer_layer(self, act: Activation):
        for layer in self.layers:
            if layer.output is act:
                return layer
        return None

    def channel_slice(self, node: Node, out_name: str, x: Activation, c0: int, c1: int) -> None:
        C = c1 - c0
        if c0 % self.N == 0:
            act = Activation(out_name, C, x.H, x.W, self.N, parent=(x, c0 // self.N))
            self.bind(out_name, act)
            return
        w = np.zeros((C, x.C, 1, 1), np.float32)
        w[np.arange(C), c0 + np.arange(C)] = 1.0
        out = self.new_act(out_name, C, x.H, x.W)
        self.add_layer(ConvLayer(f"{node.name}/{out_name}", [ConvInput(x, w)], out, np.zeros(C, np.float32), (1, 1), ops=[node.op_type], nodes=[node.name]), node, None)
        self.bind(out_name, out)

    def op_Split(self, node: Node) -> None:
        r = self.ref(node, 0)
        axis = int(node.attr("axis", 0))
        if not self.channel_axis(node, r, axis):
            raise Unsupported(node, f"split on axis {axis} (only the channel axis runs on the accelerator)")
        x = self.act_of(node, 0)
        c0 = 0
        for out in node.outputs:
            size = self.shape(out)[axis % len(r.shape)]
            if out:
                self.channel_slice(node, out, x, c0, c0 + size)
            c0 += size

    def op_Slice(self, node: Node) -> None:
        r = self.ref(node, 0)
        if self.g.opset < 10:
            starts, ends = node.attr("starts"), node.attr("ends")
            axes, steps = node.attr("axes"), None
        else:
            starts = self.const(node, 1, "starts").tolist()
            ends = self.const(node, 2, "ends").tolist()
            axes = self.opt_const(node, 3)
            steps = self.opt_const(node, 4)
            axes = None if axes is None else axes.tolist()
            steps = None if steps is None else steps.tolist()
        rank = len(r.shape)
        axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
        steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
        index = [slice(None)] * rank
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(int(s), int(e), int(st))
        sliced = r.elements[tuple(index)]
        out_name = node.outputs[0]
        if r.canonical and len(axes) == 1 and self.channel_axis(node, r, axes[0]) and steps[0] == 1:
            chans = sliced.reshape(-1)
            c0 = int(chans.min() // r.act.P)
            c1 = int(chans.max() // r.act.P) + 1
            return self.channel_slice(node, out_name, r.act, c0, c1)
        self.view(node, sliced)

    def op_Pad(self, node: Node) -> None:
        r = self.ref(node, 0)
        mode = node.attr("mode", "constant")
        if self.g.opset < 11:
            pads = [int(p) for p in node.attr("pads")]
            value = float(node.attr("value", 0.0))
        else:
            pads = self.const(node, 1, "pads").astype(int).tolist()
            v = self.opt_const(node, 2)
            value = 0.0 if v is None or np.size(v) == 0 else float(np.asarray(v).reshape(-1)[0])
            axes = self.opt_const(node, 3)
            if axes is not None:
                full = [0] * (2 * len(r.shape))
                for i, a in enumerate(np.asarray(axes).tolist()):
                    full[int(a) % len(r.shape)] = pads[i]
                    full[int(a) % len(r.shape) + len(r.shape)] = pads[i + len(axes)]
                pads = full
        if len(r.shape) != 4:
            raise Unsupported(node, "padding a tensor that is not NCHW")
        begin, end = pads[:4], pads[4:]
        if begin[0] or begin[1] or end[0] or end[1]:
            raise Unsupported(node, "padding the batch or channel axis")
        x = self.act_of(node, 0)
        top, left, bottom, right = begin[2], begin[3], end[2], end[3]
        out_shape = self.shape(node.outputs[0])
        OH, OW = out_shape[2], out_shape[3]
        if mode == "constant" and min(top, left, bottom, right) >= 0:
            w = np.ones((x.C, 1, 1), np.float32)
            out = self.new_act(node.outputs[0], x.C, OH, OW)
            post = []
            if value != 0.0:
                border = np.full((x.C, OH, OW), value, np.float32)
                border[:, top:top + x.H, left:left + x.W] = 0.0
                post.append(PostOp("add_const", values=border, node=node.name))
            self.add_layer(ConvLayer(node.name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), (1, 1), pads=(top, left, bottom, right),
                                     post_ops=post, ops=["Pad"], nodes=[node.name]), node, None)
            self.bind(node.outputs[0], out)
            return
        if mode not in ("edge", "reflect", "constant"):
            raise Unsupported(node, f"pad mode {mode!r}")
        if mode == "constant":
            raise Unsupported(node, "mixing negative (cropping) and positive constant pads")
        rows = self.pad_index(x.H, top, OH, mode)
        cols = self.pad_index(x.W, left, OW, mode)
        source = np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1)
        out = self.new_act(node.outputs[0], x.C, OH, OW)
        self.layers.append(RemapLayer(node.name, x, out, source, ops=["Pad"], nodes=[node.name]))
        self.bind(node.outputs[0], out)

    @staticmethod
    def pad_index(size: int, before: int, n_out: int, mode: str) -> np.ndarray:
        i = np.arange(n_out) - before
        if mode == "edge":
            return np.clip(i, 0, size - 1)
        period = 2 * (size - 1) if size > 1 else 1
        i = np.abs(i) % period if size > 1 else np.zeros_like(i)
        return np.where(i >= size, period - i, i)

    def op_Resize(self, node: Node) -> None:
        mode = node.attr("mode", "nearest")
        if mode != "nearest":
            return self.resize_separable(node)
        r = self.ref(node, 0)
        if len(r.shape) != 4:
            raise Unsupported(node, "resizing a tensor that is not NCHW")
        x = self.act_of(node, 0)
        out_shape = self.shape(node.outputs[0])
        if out_shape[1] != x.C:
            raise Unsupported(node, "resizing the channel axis")
        source = self.nearest_source(node, x, out_shape)
        out = self.new_act(node.outputs[0], x.C, out_shape[2], out_shape[3])
        self.layers.append(RemapLayer(node.name, x, out, source, ops=[node.op_type], nodes=[node.name]))
        self.bind(node.outputs[0], out)

    op_Upsample = op_Resize

    def run_node(self, node: Node, x: np.ndarray) -> np.ndarray:
        """Run ``node`` alone in onnxruntime on ``x`` (its constant inputs as they are)."""
        import onnx

        from systolix.onnxrt import session

        key = (node.name, x.shape)
        sess = self._sessions.get(key) if hasattr(self, "_sessions") else None
        if sess is None:
            inputs = [onnx.helper.make_tensor_value_info(node.inputs[0], onnx.TensorProto.FLOAT, list(x.shape))]
            inits = [onnx.numpy_helper.from_array(np.asarray(self.g.const(n)), n) for n in node.inputs[1:] if n]
            proto = onnx.helper.make_node(node.op_type, node.inputs, node.outputs[:1], **dict(node.attrs))
            graph = onnx.helper.make_graph([proto], "probe", inputs, [onnx.helper.make_tensor_value_info(node.outputs[0], onnx.TensorProto.FLOAT, None)], inits)
            model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", self.g.opset)])
            model.ir_version = min(model.ir_version, 8)
            # (onnxruntime's logging is off: the probe's declared shape may be onnx's, not onnxruntime's)
            sess = session(model, source=f"node {node.name!r} ({node.op_type})")
            if not hasattr(self, "_sessions"):
                self._sessions = {}
            self._sessions[key] = sess
        return sess.run(None, {node.inputs[0]: x.astype(np.float32)})[0]

    def resize_separable(self, node: Node) -> None:
        """Linear/cubic resize as two pixel mixes (columns, then rows), with the interpolation
        weights read off onnxruntime itself by resizing one-hot rows and columns."""
        r = self.ref(node, 0)
        if len(r.shape) != 4:
            raise Unsupported(node, "resizing a tensor that is not NCHW")
        x = self.act_of(node, 0)
        out_shape = self.shape(node.outputs[0])
        if out_shape[1] != x.C or out_shape[0] != 1:
            raise Unsupported(node, "resizing the batch or channel axis")
        OH, OW = out_shape[2], out_shape[3]
        H, W = x.H, x.W
        probe = np.zeros((1, x.C, H, W), np.float32)
        Rw = np.zeros((OW, W))
        for iw in range(W):
            probe[:] = 0
            probe[0, :, :, iw] = 1
            Rw[:, iw] = self.run_node(node, probe)[0, 0, 0, :]
        Rh = np.zeros((OH, H))
        for ih in range(H):
            probe[:] = 0
            probe[0, :, ih, :] = 1
            Rh[:, ih] = self.run_node(node, probe)[0, 0, :, 0]
        # The weights above assume the map is separable (rows' weights sum to one): check it.
        test = np.random.default_rng(0).normal(size=(1, x.C, H, W)).astype(np.float32)
        expect = self.run_node(node, test)
        mine = np.einsum("qh,chw,pw->cqp", Rh, test[0].astype(np.float64), Rw)
        if not np.allclose(mine, expect[0], atol=1e-4):
            raise Unsupported(node, "this resize is not a separable linear map")
        mid = self.new_act(f"{node.outputs[0]}:columns", x.C, H, OW)
        q, p = np.nonzero(Rw)
        rows = np.arange(H)
        out_pix = (rows[:, None] * OW + q[None, :]).reshape(-1)
        in_pix = (rows[:, None] * W + p[None, :]).reshape(-1)
        coef = np.tile(Rw[q, p], H)
        self.layers.append(PixelMixLayer(f"{node.name}/columns", x, mid, out_pix, in_pix, coef.astype(np.float32), ops=[node.op_type], nodes=[node.name]))
        out = self.new_act(node.outputs[0], x.C, OH, OW)
        q, p = np.nonzero(Rh)
        cols = np.arange(OW)
        out_pix = (q[:, None] * OW + cols[None, :]).reshape(-1)
        in_pix = (p[:, None] * OW + cols[None, :]).reshape(-1)
        coef = np.repeat(Rh[q, p], OW)
        self.layers.append(PixelMixLayer(f"{node.name}/rows", mid, out, out_pix, in_pix, coef.astype(np.float32), ops=[node.op_type], nodes=[node.name]))
        self.bind(node.outputs[0], out)

    def nearest_source(self, node: Node, x: Activation, out_shape) -> np.ndarray:
        """Which input pixel each output pixel copies, as onnxruntime itself computes it.

        The node runs once in onnxruntime on a tensor whose values are the row (channel 0) and
        column (channel 1) of each pixel: every coordinate mode and rounding rule comes out
        exactly as the reference computes it.
        """
        import onnx

        from systolix.onnxrt import session

        C = x.C
        probe = np.zeros((1, C, x.H, x.W), np.float32)
        rows, cols = np.meshgrid(np.arange(x.H), np.arange(x.W), indexing="ij")
        probe[0, 0] = rows
        if C > 1:
            probe[0, 1] = cols
        inputs = [onnx.helper.make_tensor_value_info(node.inputs[0], onnx.TensorProto.FLOAT, [1, C, x.H, x.W])]
        inits = []
        for name in node.inputs[1:]:
            if name:
                inits.append(onnx.numpy_helper.from_array(np.asarray(self.g.const(name)), name))
        proto = onnx.helper.make_node(node.op_type, node.inputs, node.outputs[:1], **{k: v for k, v in node.attrs.items()})
        graph = onnx.helper.make_graph([proto], "probe", inputs,
                                       [onnx.helper.make_tensor_value_info(node.outputs[0], onnx.TensorProto.FLOAT, None)], inits)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", self.g.opset)])
        model.ir_version = min(model.ir_version, 8)
        sess = session(model, source=f"node {node.name!r} ({node.op_type})")
        res = sess.run(None, {node.inputs[0]: probe})[0]
        src_rows = res[0, 0].astype(np.int64)
        if C > 1:
            src_cols = res[0, 1].astype(np.int64)
        else:
            probe[0, 0] = cols
            src_cols = sess.run(None, {node.inputs[0]: probe})[0][0, 0].astype(np.int64)
        return np.stack([src_rows, src_cols], axis=-1)


def lower(graph: Graph, array_size: int, data_type: DataType = DataType.FP16BP8) -> HirProgram:
    """Lower a graph to layers for an ``array_size`` array computing in ``data_type`` (every
    preset's FP16BP8 unless given); raises ``Unsupported`` for the first node that cannot run."""
    return Lowering(graph, array_size, data_type=data_type).run()
