"""A small graph builder on top of ``onnx.helper`` that writes each op the way its opset spells it.

The model builders describe networks layer by layer (``conv``, ``bn``, ``split``, ``resize``...);
this module turns that into nodes and initializers, keeps the channel count of every tensor (so a
conv knows its input channels), draws weights from one seeded generator (so a build is
deterministic), and raises ``ModelBuildError`` when an op or attribute does not exist at the
requested opset (e.g. ``ceil_mode`` before opset 10).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from systolix.errors import SystolixError

MIN_OPSET = 9
MAX_OPSET = 21
DEFAULT_OPSET = 13

PRODUCER = "systolix.models"


class ModelBuildError(SystolixError):
    """A test model cannot be built as asked (unknown name, bad option, op missing at that opset)."""


def _pair(v) -> list[int]:
    return [int(v), int(v)] if np.isscalar(v) else [int(a) for a in v]


_OLD_MODES = ("nearest", "linear")  # the Resize/Upsample modes of opsets 9 and 10


class GraphBuilder:
    """Accumulates nodes, initializers, inputs and outputs of one ONNX graph.

    Every helper returns the name of the tensor it produced (a list for multi-output ops) and
    records that tensor's channel count (axis 1) in ``self.channels`` when it is known.
    """

    def __init__(self, name: str, opset: int = DEFAULT_OPSET, seed: int = 0):
        if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
            raise ModelBuildError(f"{name}: opset {opset!r} is outside the supported range {MIN_OPSET}..{MAX_OPSET}")
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.channels: dict[str, int] = {}
        self.metadata: dict[str, str] = {}
        self.input_layouts: dict[str, str] = {}
        # Range of BatchNormalization scales, i.e. of the spread of normalised activations.
        self.bn_gamma: tuple[float, float] = (0.7, 1.3)
        self._used_names: set[str] = set()
        self._counters: dict[str, int] = {}

    # ----------------------------------------------------------------- naming and bookkeeping
    def fresh(self, hint: str) -> str:
        """A tensor/node name not used before, derived from ``hint``."""
        n = self._counters.get(hint, 0)
        while True:
            name = hint if n == 0 else f"{hint}_{n}"
            n += 1
            if name not in self._used_names:
                self._counters[hint] = n
                self._used_names.add(name)
                return name

    def need_opset(self, minimum: int, what: str, maximum: int | None = None) -> None:
        """Refuse to write ``what`` at an opset where ONNX does not define it."""
        if self.opset < minimum or (maximum is not None and self.opset > maximum):
            rng = f">= {minimum}" if maximum is None else f"{minimum}..{maximum}"
            raise ModelBuildError(f"{self.name}: {what} needs opset {rng}, not {self.opset}")

    def ch(self, x: str) -> int:
        """Channel count (axis 1) of tensor ``x``."""
        try:
            return self.channels[x]
        except KeyError:
            raise ModelBuildError(f"{self.name}: channel count of tensor {x!r} is unknown") from None

    # ----------------------------------------------------------------- graph interface
    def input(self, name: str, shape: Sequence[int], layout: str | None = None,
              dtype: int = TensorProto.FLOAT) -> str:
        """Declare a graph input. ``layout`` (``NCHW``, ``NHWC``, ``NC``...) guides example inputs."""
        self._used_names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        if layout is None:
            layout = {4: "NCHW", 2: "NC"}.get(len(shape), "N" + "D" * (len(shape) - 1))
        self.input_layouts[name] = layout
        if len(shape) >= 2:
            self.channels[name] = int(shape[layout.index("C")] if "C" in layout else shape[1])
        return name

    def output(self, x: str, name: str | None = None) -> str:
        """Declare ``x`` a graph output, renamed to ``name`` (the producing node's output is renamed)."""
        if name is not None and name != x:
            for node in self.nodes:
                for i, o in enumerate(node.output):
                    if o == x:
                        node.output[i] = name
                for i, o in enumerate(node.input):
                    if o == x:
                        node.input[i] = name
            if x in self.channels:
                self.channels[name] = self.channels[x]
            self._used_names.add(name)
            x = name
        self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))
        return x

    def const(self, hint: str, value, dtype=np.float32) -> str:
        """An initializer holding ``value``."""
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: Sequence[str], n_outputs: int = 1, name: str | None = None,
             outputs: Sequence[str] | None = None, **attrs) -> str | list[str]:
        """Append one node; returns its output name (or names when ``n_outputs > 1``)."""
        node_name = self.fresh(name or op.lower())
        if outputs is None:
            outputs = [node_name] if n_outputs == 1 else [self.fresh(f"{node_name}_out{i}") for i in range(n_outputs)]
        else:
            self._used_names.update(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=node_name, **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def _same_channels(self, x: str, y: str) -> str:
        if x in self.channels:
            self.channels[y] = self.channels[x]
        return y

    # ----------------------------------------------------------------- weights
    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, shape).astype(np.float32)

    # ----------------------------------------------------------------- layers on the accelerator
    def conv(self, x: str, cout: int, kernel=3, stride=1, pads=None, auto_pad: str | None = None,
             dilations=1, group: int = 1, bias: bool = True, gain: float = 2.0, name: str | None = None,
             bias_std: float = 0.1) -> str:
        """Conv with He-style weights (std = sqrt(gain / fan_in)). ``pads`` is ONNX's
        [top, left, bottom, right] or one number for all sides."""
        cin = self.ch(x)
        kh, kw = _pair(kernel)
        if cin % group or cout % group:
            raise ModelBuildError(f"{self.name}: conv groups {group} do not divide channels {cin}->{cout}")
        fan_in = cin // group * kh * kw
        w = self.const(f"{name or 'conv'}_W", self.normal((cout, cin // group, kh, kw), np.sqrt(gain / fan_in)))
        ins = [x, w]
        if bias:
            ins.append(self.const(f"{name or 'conv'}_B", self.normal((cout,), bias_std)))
        if pads is not None and np.isscalar(pads):
            pads = [int(pads)] * 4
        y = self.node("Conv", ins, name=name or "conv", kernel_shape=[kh, kw], strides=_pair(stride),
                      pads=None if pads is None else [int(p) for p in pads], auto_pad=auto_pad,
                      dilations=None if dilations == 1 else _pair(dilations), group=None if group == 1 else group)
        self.channels[y] = cout
        return y

    def bn(self, x: str, epsilon: float = 1e-3, name: str | None = None, gamma=None,
           beta_std: float = 0.2) -> str:
        """BatchNormalization with random scale/shift; mean and variance are placeholders until
        :func:`systolix.models.unit_scale.fit_batchnorms` sets them from data."""
        c = self.ch(x)
        hint = name or "bn"
        params = [self.const(f"{hint}_gamma", self.uniform((c,), *(gamma or self.bn_gamma))),
                  self.const(f"{hint}_beta", self.normal((c,), beta_std)),
                  self.const(f"{hint}_mean", np.zeros(c)), self.const(f"{hint}_var", np.ones(c))]
        y = self.node("BatchNormalization", [x, *params], name=hint, epsilon=float(epsilon))
        return self._same_channels(x, y)

    def gemm(self, x: str, n_out: int, n_in: int | None = None, trans_b: bool = True, bias: bool = True,
             alpha: float | None = None, beta: float | None = None, gain: float = 2.0, name: str | None = None,
             trans_a: bool = False) -> str:
        """Gemm ``y = alpha * x @ W(.T) + beta * b`` with He-style weights."""
        n_in = n_in if n_in is not None else self.ch(x)
        hint = name or "dense"
        std = np.sqrt(gain / n_in) / (abs(alpha) if alpha else 1.0)
        w = self.normal((n_out, n_in) if trans_b else (n_in, n_out), std)
        ins = [x, self.const(f"{hint}_W", w)]
        if bias:
            ins.append(self.const(f"{hint}_B", self.normal((n_out,), 0.1)))
        elif self.opset < 11:
            ins.append(self.const(f"{hint}_B", np.zeros(n_out)))  # C is required before opset 11
        y = self.node("Gemm", ins, name=hint, transB=1 if trans_b else None, transA=1 if trans_a else None,
                      alpha=alpha, beta=beta)
        self.channels[y] = n_out
        return y

    def relu(self, x: str, name: str | None = None) -> str:
        return self._same_channels(x, self.node("Relu", [x], name=name or "relu"))

    def leaky_relu(self, x: str, alpha: float = 0.1, name: str | None = None) -> str:
        return self._same_channels(x, self.node("LeakyRelu", [x], name=name or "leaky_relu", alpha=float(alpha)))

    def clip(self, x: str, low: float | None = 0.0, high: float | None = 6.0, name: str | None = None) -> str:
        """Clip (ReLU6 by default), as attributes before opset 11 and as inputs after."""
        if self.opset < 11:
            y = self.node("Clip", [x], name=name or "clip", min=None if low is None else float(low),
                          max=None if high is None else float(high))
        else:
            ins = [x, "" if low is None else self.const("clip_min", low),
                   "" if high is None else self.const("clip_max", high)]
            while ins[-1] == "":
                ins.pop()
            y = self.node("Clip", ins, name=name or "clip")
        return self._same_channels(x, y)

    def prelu(self, x: str, slope: np.ndarray, name: str | None = None) -> str:
        s = self.const("prelu_slope", slope)
        return self._same_channels(x, self.node("PRelu", [x, s], name=name or "prelu"))

    def unary(self, op: str, x: str, name: str | None = None, **attrs) -> str:
        return self._same_channels(x, self.node(op, [x], name=name or op.lower(), **attrs))

    def binary(self, op: str, a: str, b: str, name: str | None = None) -> str:
        y = self.node(op, [a, b], name=name or op.lower())
        for t in (a, b):
            if t in self.channels:
                self.channels[y] = max(self.channels.get(y, 0), self.channels[t])
        return y

    def add(self, a: str, b: str, name: str | None = None) -> str:
        return self.binary("Add", a, b, name)

    def maxpool(self, x: str, kernel=2, stride=None, pads=None, auto_pad=None, ceil_mode: bool = False,
                dilations=1, name: str | None = None) -> str:
        if ceil_mode:
            self.need_opset(10, "MaxPool ceil_mode")
        if dilations != 1:
            self.need_opset(10, "MaxPool dilations")
        y = self.node("MaxPool", [x], name=name or "maxpool", kernel_shape=_pair(kernel),
                      strides=_pair(stride if stride is not None else kernel),
                      pads=None if pads is None else ([int(pads)] * 4 if np.isscalar(pads) else list(pads)),
                      auto_pad=auto_pad, ceil_mode=1 if ceil_mode else None,
                      dilations=None if dilations == 1 else _pair(dilations))
        return self._same_channels(x, y)

    def avgpool(self, x: str, kernel=2, stride=None, pads=None, auto_pad=None, ceil_mode: bool = False,
                count_include_pad: bool | None = None, name: str | None = None) -> str:
        if ceil_mode:
            self.need_opset(10, "AveragePool ceil_mode")
        y = self.node("AveragePool", [x], name=name or "avgpool", kernel_shape=_pair(kernel),
                      strides=_pair(stride if stride is not None else kernel),
                      pads=None if pads is None else ([int(pads)] * 4 if np.isscalar(pads) else list(pads)),
                      auto_pad=auto_pad, ceil_mode=1 if ceil_mode else None,
                      count_include_pad=None if count_include_pad is None else int(count_include_pad))
        return self._same_channels(x, y)

    def gap(self, x: str, name: str | None = None) -> str:
        return self._same_channels(x, self.node("GlobalAveragePool", [x], name=name or "global_average_pool"))

    def concat(self, xs: Sequence[str], axis: int = 1, name: str | None = None) -> str:
        y = self.node("Concat", list(xs), name=name or "concat", axis=axis)
        if axis == 1 and all(t in self.channels for t in xs):
            self.channels[y] = sum(self.channels[t] for t in xs)
        return y

    def split(self, x: str, sizes: Sequence[int], axis: int = 1, name: str | None = None) -> list[str]:
        """Split into ``sizes`` along ``axis``: an attribute before opset 13, an input after."""
        hint = name or "split"
        if self.opset < 13:
            outs = self.node("Split", [x], n_outputs=len(sizes), name=hint, axis=axis, split=list(sizes))
        else:
            s = self.const(f"{hint}_sizes", np.asarray(sizes), dtype=np.int64)
            outs = self.node("Split", [x, s], n_outputs=len(sizes), name=hint, axis=axis)
        outs = [outs] if isinstance(outs, str) else outs
        if axis == 1:
            for o, s in zip(outs, sizes, strict=True):
                self.channels[o] = int(s)
        return outs

    def pad(self, x: str, pads: Sequence[int], mode: str = "constant", value: float = 0.0,
            name: str | None = None) -> str:
        """Pad with ONNX's pads list (all begins, then all ends): attributes before opset 11."""
        hint = name or "pad"
        if mode == "wrap":
            self.need_opset(19, "Pad mode 'wrap'")
        if self.opset < 11:
            y = self.node("Pad", [x], name=hint, pads=list(pads), mode=mode,
                          value=float(value) if mode == "constant" else None)
        else:
            ins = [x, self.const(f"{hint}_pads", np.asarray(pads), dtype=np.int64)]
            if mode == "constant" and value != 0.0:
                ins.append(self.const(f"{hint}_value", value))
            y = self.node("Pad", ins, name=hint, mode=mode)
        return self._same_channels(x, y)

    def resize(self, x: str, scales: Sequence[float] | None = None, sizes: Sequence[int] | None = None,
               mode: str = "nearest", coordinate_transformation_mode: str = "asymmetric",
               nearest_mode: str | None = None, name: str | None = None, use_upsample: bool = False,
               cubic_coeff_a: float | None = None, exclude_outside: int | None = None) -> str:
        """Resize (or Upsample at opset 9) by ``scales`` or to ``sizes``, each in the form its opset
        allows; a coordinate mode an opset cannot express is an error, not a silent change."""
        hint = name or "resize"
        ctm = coordinate_transformation_mode
        if use_upsample or self.opset < 10:
            if self.opset >= 10:
                raise ModelBuildError(f"{self.name}: Upsample is deprecated from opset 10; use Resize")
            if sizes is not None or ctm != "asymmetric" or nearest_mode is not None or mode not in _OLD_MODES:
                raise ModelBuildError(f"{self.name}: Upsample (opset 9) only scales, asymmetric, nearest/linear")
            y = self.node("Upsample", [x, self.const(f"{hint}_scales", scales)], name=hint, mode=mode)
        elif self.opset == 10:
            if sizes is not None or ctm != "asymmetric" or nearest_mode is not None or mode not in _OLD_MODES:
                raise ModelBuildError(f"{self.name}: Resize at opset 10 has only scales, asymmetric coordinates "
                                      f"and nearest/linear modes (asked: {mode}, {ctm}, sizes={sizes})")
            y = self.node("Resize", [x, self.const(f"{hint}_scales", scales)], name=hint, mode=mode)
        else:
            if ctm == "half_pixel_symmetric":
                self.need_opset(19, "Resize coordinate mode half_pixel_symmetric")
            if ctm == "tf_half_pixel_for_nn" and self.opset >= 19:
                # still accepted by onnxruntime, but removed from the spec at 19
                raise ModelBuildError(f"{self.name}: tf_half_pixel_for_nn is not defined at opset {self.opset}")
            empty = "" if self.opset >= 13 else self.const(f"{hint}_empty", np.zeros(0))
            roi = empty
            sc = self.const(f"{hint}_scales", scales) if scales is not None else empty
            ins = [x, roi, sc]
            if sizes is not None:
                ins.append(self.const(f"{hint}_sizes", np.asarray(sizes), dtype=np.int64))
            y = self.node("Resize", ins, name=hint, mode=mode, coordinate_transformation_mode=ctm,
                          nearest_mode=nearest_mode if mode == "nearest" else None,
                          cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside)
        return self._same_channels(x, y)

    def squeeze(self, x: str, axes: Sequence[int], name: str | None = None) -> str:
        if self.opset < 13:
            return self.node("Squeeze", [x], name=name or "squeeze", axes=list(axes))
        return self.node("Squeeze", [x, self.const("squeeze_axes", np.asarray(axes), dtype=np.int64)],
                         name=name or "squeeze")

    def unsqueeze(self, x: str, axes: Sequence[int], name: str | None = None) -> str:
        if self.opset < 13:
            return self.node("Unsqueeze", [x], name=name or "unsqueeze", axes=list(axes))
        return self.node("Unsqueeze", [x, self.const("unsqueeze_axes", np.asarray(axes), dtype=np.int64)],
                         name=name or "unsqueeze")

    def reshape(self, x: str, shape: Sequence[int], name: str | None = None) -> str:
        return self.node("Reshape", [x, self.const("reshape_shape", np.asarray(shape), dtype=np.int64)],
                         name=name or "reshape")

    def flatten(self, x: str, axis: int = 1, name: str | None = None) -> str:
        return self.node("Flatten", [x], name=name or "flatten", axis=axis)

    def transpose(self, x: str, perm: Sequence[int], name: str | None = None) -> str:
        return self.node("Transpose", [x], name=name or "transpose", perm=list(perm))

    def dropout(self, x: str, ratio: float = 0.5, name: str | None = None) -> str:
        """Dropout in inference mode (an identity), ratio as attribute before opset 12."""
        if self.opset < 12:
            y = self.node("Dropout", [x], name=name or "dropout", ratio=float(ratio))
        else:
            y = self.node("Dropout", [x, self.const("dropout_ratio", ratio)], name=name or "dropout")
        return self._same_channels(x, y)

    # ----------------------------------------------------------------- result
    def model(self, doc: str = "", kind: str = "tensor", **metadata) -> onnx.ModelProto:
        """The finished, checked ``ModelProto`` (IR version: the lowest that carries this opset)."""
        graph = helper.make_graph(self.nodes, self.name.replace("/", "_"), self.inputs, self.outputs,
                                  initializer=self.initializers)
        opset_id = helper.make_opsetid("", self.opset)
        model = helper.make_model(graph, opset_imports=[opset_id], producer_name=PRODUCER,
                                  producer_version="1", doc_string=doc,
                                  ir_version=helper.find_min_ir_version_for([opset_id]))
        meta = {"systolix.model": self.name, "systolix.kind": kind,
                "systolix.input_layouts": json.dumps(self.input_layouts, sort_keys=True)}
        meta.update({f"systolix.{k}": str(v) for k, v in metadata.items()})
        meta.update(self.metadata)
        helper.set_model_props(model, meta)
        try:
            # Exporters declare output shapes; so do we, from onnx's own shape inference.
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
            for out, inf in zip(model.graph.output, inferred.graph.output, strict=True):
                out.CopyFrom(inf)
            if not all(_static(o) for o in model.graph.output):
                _shapes_from_onnxruntime(model)
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise ModelBuildError(f"{self.name}: the built ONNX model is invalid: {e}") from e
        return model


def _static(vi: onnx.ValueInfoProto) -> bool:
    shape = vi.type.tensor_type.shape
    return vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim)


def _shapes_from_onnxruntime(model: onnx.ModelProto) -> None:
    """Output shapes that onnx's inference cannot see through (a Reshape whose target comes from a
    Slice of a Constant...) are taken from one onnxruntime run on example inputs."""
    from systolix.models.unit_scale import session
    from systolix.models.inputs import example_inputs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for out in probe.graph.output:
        if not _static(out):
            out.type.tensor_type.ClearField("shape")
    names = [o.name for o in probe.graph.output]
    values = session(probe).run(names, example_inputs(probe))
    for out, value in zip(model.graph.output, values, strict=True):
        if not _static(out):
            out.CopyFrom(helper.make_tensor_value_info(out.name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                       list(value.shape)))
