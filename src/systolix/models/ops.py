"""The op catalogue: one small model per op and per awkward case the compiler must support.

Names are ``ops/<case>`` (runs on the accelerator), ``host/<op>`` (an op the accelerator cannot run,
between accelerator layers), ``cnn/<name>`` (small networks mixing many ops) and ``bad/<case>``
(valid ONNX a weight-stationary accelerator cannot run: weights that are not constants). Channel counts are
deliberately odd (3, 5, 17, 33) and inputs non-square, so that nothing lines up with an 8, 16 or 32
array by accident. Each entry is a function that draws its graph on a :class:`GraphBuilder`; models
with BatchNormalization are brought to unit scale like the big ones.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from systolix.models._common import finish
from systolix.models._graph import GraphBuilder, ModelBuildError


@dataclass(frozen=True)
class OpCase:
    """One catalogue entry: how to draw it and which opsets it exists at."""

    draw: Callable[[GraphBuilder], str | None]   # returns the classifier head's Gemm name, if any
    description: str
    default_opset: int = 13
    min_opset: int = 9
    max_opset: int = 21


CASES: dict[str, OpCase] = {}


def case(name: str, description: str, default_opset: int = 13, min_opset: int = 9, max_opset: int = 21):
    """Register a catalogue entry under ``name``."""
    def register(fn):
        CASES[name] = OpCase(fn, description, default_opset, min_opset, max_opset)
        return fn
    return register


def build_case(name: str, opset: int | None = None, seed: int | None = None, unit_scale: bool = True) -> onnx.ModelProto:
    """Build catalogue entry ``name`` at ``opset`` (its default when None)."""
    entry = CASES[name]
    opset = entry.default_opset if opset is None else opset
    if not entry.min_opset <= opset <= entry.max_opset:
        raise ModelBuildError(f"{name}: exists at opsets {entry.min_opset}..{entry.max_opset}, not {opset}")
    b = GraphBuilder(name, opset, zlib.crc32(name.encode()) if seed is None else seed)
    head = entry.draw(b)
    kind = "classifier" if head else "tensor"
    return finish(b, entry.description, kind=kind, head=head, unit_scale=unit_scale)


def _x(b: GraphBuilder, c: int, h: int, w: int, name: str = "x") -> str:
    return b.input(name, [1, c, h, w])


def _out(b: GraphBuilder, t: str, name: str = "y") -> None:
    b.output(t, name)


# ------------------------------------------------------------------------------------------ Conv
def _conv_case(name, desc, c, h, w, cout, **conv):
    @case(name, desc, min_opset=conv.pop("min_opset", 9))
    def draw(b):
        _out(b, b.conv(_x(b, c, h, w), cout, **conv))


_conv_case("ops/conv3x3_3to5", "Conv 3x3 pad 1, 3 -> 5 channels, 9x11", 3, 9, 11, 5, kernel=3, pads=1)
_conv_case("ops/conv3x3_17to33", "Conv 3x3 pad 1, 17 -> 33 channels, 7x10", 17, 7, 10, 33, kernel=3, pads=1)
_conv_case("ops/conv1x1_33to17", "Conv 1x1, 33 -> 17 channels, 6x5", 33, 6, 5, 17, kernel=1)
_conv_case("ops/conv1x1_3to70", "Conv 1x1, 3 -> 70 channels (more than two 32-vectors)", 3, 5, 7, 70, kernel=1)
_conv_case("ops/conv_stride2_odd", "Conv 3x3 stride 2 pad 1 on an odd 13x11 input, 5 -> 17", 5, 13, 11, 17,
           kernel=3, stride=2, pads=1)
_conv_case("ops/conv_stride2_valid", "Conv 3x3 stride 2 no padding, 12x9 input, 17 -> 5", 17, 12, 9, 5,
           kernel=3, stride=2)
_conv_case("ops/conv_rect_kernel_strides", "Conv 1x3 kernel, strides (1, 2), pads left/right 1, 5 -> 17",
           5, 9, 14, 17, kernel=(1, 3), stride=(1, 2), pads=[0, 1, 0, 1])
_conv_case("ops/conv_dilated_17ch", "Conv 3x3 dilation 2 pad 2, 17 -> 17, 11x13", 17, 11, 13, 17,
           kernel=3, dilations=2, pads=2)
_conv_case("ops/conv_dilated_rect", "Conv 3x3 dilations (1, 3), pads (1, 3), 5 -> 17, 12x15", 5, 12, 15, 17,
           kernel=3, dilations=(1, 3), pads=[1, 3, 1, 3])
_conv_case("ops/conv_dilated_stride2", "Conv 3x3 dilation 2 stride 2 pad 2, 3 -> 5, 15x13", 3, 15, 13, 5,
           kernel=3, dilations=2, stride=2, pads=2)
_conv_case("ops/conv_pads_asymmetric", "Conv 3x3 pads top 1, left 0, bottom 2, right 1, 5 -> 17", 5, 8, 9, 17,
           kernel=3, pads=[1, 0, 2, 1])
_conv_case("ops/conv_auto_same_upper", "Conv 3x3 stride 2 auto_pad SAME_UPPER (odd total pad), 10x12, 5 -> 17",
           5, 10, 12, 17, kernel=3, stride=2, auto_pad="SAME_UPPER")
_conv_case("ops/conv_auto_same_lower", "Conv 3x3 stride 2 auto_pad SAME_LOWER (odd total pad), 10x12, 5 -> 17",
           5, 10, 12, 17, kernel=3, stride=2, auto_pad="SAME_LOWER")
_conv_case("ops/conv_auto_valid", "Conv 3x3 auto_pad VALID, 9x8, 5 -> 17", 5, 9, 8, 17, kernel=3, auto_pad="VALID")
_conv_case("ops/conv_even_kernel_same_lower", "Conv 2x2 auto_pad SAME_LOWER (pads top/left), 17 -> 5",
           17, 7, 6, 5, kernel=2, auto_pad="SAME_LOWER")
_conv_case("ops/conv_kernel7_stride2", "Conv 7x7 stride 2 pad 3 (a ResNet stem), 23x19, 3 -> 17", 3, 23, 19, 17,
           kernel=7, stride=2, pads=3)
_conv_case("ops/conv_kernel5", "Conv 5x5 pad 2, 5 -> 5, 9x9", 5, 9, 9, 5, kernel=5, pads=2)
_conv_case("ops/conv_kernel_covers_input", "Conv 5x5 pad 2 on a 3x4 input (kernel larger than input)",
           5, 3, 4, 17, kernel=5, pads=2)
_conv_case("ops/conv_grouped_g3", "Conv 3x3 groups 3, 15 -> 33, 7x9", 15, 7, 9, 33, kernel=3, pads=1, group=3)
_conv_case("ops/conv_depthwise_17ch", "Depthwise conv 3x3 pad 1, 17 channels, 9x10", 17, 9, 10, 17,
           kernel=3, pads=1, group=17)
_conv_case("ops/conv_depthwise_33ch_stride2", "Depthwise conv 3x3 stride 2 pads bottom/right, 33 channels, 10x9",
           33, 10, 9, 33, kernel=3, stride=2, pads=[0, 0, 1, 1], group=33)
_conv_case("ops/conv_depthwise_multiplier2", "Depthwise conv with channel multiplier 2, 5 -> 10", 5, 8, 7, 10,
           kernel=3, pads=1, group=5)
_conv_case("ops/conv_no_bias", "Conv 3x3 without bias, 17 -> 5", 17, 6, 7, 5, kernel=3, pads=1, bias=False)
_conv_case("ops/conv1x1_on_1x1", "Conv 1x1 on a 1x1 map, 33 -> 17", 33, 1, 1, 17, kernel=1)


@case("ops/conv_chain", "Conv-Relu-Conv-Relu, 3 -> 17 -> 33, 10x7")
def _(b):
    x = b.relu(b.conv(_x(b, 3, 10, 7), 17, 3, pads=1))
    _out(b, b.relu(b.conv(x, 33, 3, pads=1)))


def _conv_transpose(b, x: str, cout: int, kernel: int, stride: int, pads: int = 0, **attrs) -> str:
    cin = b.ch(x)
    w = b.const("up_w", b.normal((cin, cout, kernel, kernel), (2.0 / (cin * kernel * kernel / stride ** 2)) ** 0.5))
    bias = b.const("up_b", b.normal((cout,), 0.1))
    y = b.node("ConvTranspose", [x, w, bias], name="up", kernel_shape=[kernel, kernel], strides=[stride, stride],
               pads=[pads] * 4, **attrs)
    b.channels[y] = cout
    return y


@case("ops/conv_transpose_2x2_s2", "ConvTranspose 2x2 stride 2 (U-Net up-sampling), 17 -> 5, 5x7 -> 10x14")
def _(b):
    _out(b, _conv_transpose(b, b.relu(b.conv(_x(b, 3, 5, 7), 17, 3, pads=1)), 5, 2, 2))


@case("ops/conv_transpose_4x4_s2_p1", "ConvTranspose 4x4 stride 2 pad 1 then Relu, 5 -> 33, 6x5 -> 12x10")
def _(b):
    _out(b, b.relu(_conv_transpose(b, b.conv(_x(b, 3, 6, 5), 5, 3, pads=1), 33, 4, 2, pads=1)))


@case("ops/conv_transpose_3x3_s3_output_padding", "ConvTranspose 3x3 stride 3 pad 1 output_padding 2, 5 -> 17, 4x6")
def _(b):
    _out(b, _conv_transpose(b, b.conv(_x(b, 3, 4, 6), 5, 3, pads=1), 17, 3, 3, pads=1, output_padding=[2, 2]))


# ------------------------------------------------------------------------------------------ Gemm / MatMul
@case("ops/gemm_transb", "Gemm transB=1 (PyTorch Linear), 33 -> 17")
def _(b):
    _out(b, b.gemm(b.input("x", [1, 33]), 17))


@case("ops/gemm_no_transb", "Gemm transB=0 (TensorFlow Dense), 33 -> 17")
def _(b):
    _out(b, b.gemm(b.input("x", [1, 33]), 17, trans_b=False))


@case("ops/gemm_transa", "Gemm transA=1: input stored as (33, 3), 3 rows out")
def _(b):
    x = b.input("x", [33, 3], layout="CN")
    _out(b, b.gemm(x, 17, n_in=33, trans_a=True))


@case("ops/gemm_alpha_beta", "Gemm alpha 0.5, beta 2 with a broadcast bias")
def _(b):
    _out(b, b.gemm(b.input("x", [1, 33]), 17, alpha=0.5, beta=2.0))


@case("ops/gemm_c_matrix", "Gemm with a full (5, 17) C matrix, 5 input rows")
def _(b):
    x = b.input("x", [5, 33])
    w = b.const("W", b.normal((17, 33), np.sqrt(2 / 33)))
    c = b.const("C", b.normal((5, 17), 0.5))
    _out(b, b.node("Gemm", [x, w, c], transB=1))


@case("ops/gemm_c_scalar", "Gemm with a scalar C and beta 0.5")
def _(b):
    x = b.input("x", [1, 33])
    w = b.const("W", b.normal((33, 17), np.sqrt(2 / 33)))
    _out(b, b.node("Gemm", [x, w, b.const("C", [0.75])], beta=0.5))


@case("ops/gemm_no_c", "Gemm without C (optional from opset 11)", min_opset=11)
def _(b):
    _out(b, b.gemm(b.input("x", [1, 33]), 17, bias=False))


@case("ops/gemm_batch5", "Gemm-Relu-Gemm on 5 rows, 33 -> 17 -> 5")
def _(b):
    x = b.relu(b.gemm(b.input("x", [5, 33]), 17))
    _out(b, b.gemm(x, 5, gain=1.0))


@case("ops/matmul_const_rhs", "MatMul input (1, 33) by a constant (33, 17)")
def _(b):
    x = b.input("x", [1, 33])
    _out(b, b.node("MatMul", [x, b.const("W", b.normal((33, 17), np.sqrt(2 / 33)))]))


@case("ops/matmul_3d_add", "MatMul (1, 5, 33) by a constant (33, 17), then Add bias (exported Linear)")
def _(b):
    x = b.input("x", [1, 5, 33], layout="NTC")
    y = b.node("MatMul", [x, b.const("W", b.normal((33, 17), np.sqrt(2 / 33)))])
    _out(b, b.node("Add", [y, b.const("B", b.normal((17,), 0.1))]))


@case("ops/matmul_const_lhs", "MatMul constant (17, 33) by input (33, 5)")
def _(b):
    x = b.input("x", [33, 5], layout="CN")
    _out(b, b.node("MatMul", [b.const("W", b.normal((17, 33), np.sqrt(2 / 33))), x]))


# ------------------------------------------------------------------------------------------ BatchNormalization
@case("ops/batchnorm_after_conv", "Conv-BN-Relu (BN foldable into the conv), 5 -> 17")
def _(b):
    _out(b, b.relu(b.bn(b.conv(_x(b, 5, 9, 7), 17, 3, pads=1))))


@case("ops/batchnorm_standalone", "BatchNormalization on the input, 17 channels")
def _(b):
    _out(b, b.bn(_x(b, 17, 6, 7), gamma=(0.5, 1.5)))


@case("ops/batchnorm_after_relu", "Conv-Relu-BN (not foldable into the conv), 5 -> 17")
def _(b):
    _out(b, b.bn(b.relu(b.conv(_x(b, 5, 7, 9), 17, 3, pads=1))))


@case("ops/batchnorm_before_padded_conv", "BN-Conv with padding (folding forward would be wrong at borders)")
def _(b):
    _out(b, b.conv(b.bn(_x(b, 5, 7, 6), beta_std=0.5), 17, 3, pads=1))


@case("ops/batchnorm_after_depthwise", "Depthwise conv-BN-ReLU6, 17 channels")
def _(b):
    y = b.bn(b.conv(_x(b, 17, 8, 9), 17, 3, pads=1, group=17, bias=False))
    _out(b, b.clip(y, 0.0, 6.0))


# ------------------------------------------------------------------------------------------ activations
@case("ops/relu", "Conv-Relu, 5 -> 17")
def _(b):
    _out(b, b.relu(b.conv(_x(b, 5, 7, 6), 17, 3, pads=1)))


@case("ops/relu_on_input", "Relu directly on the input (no matmul before it)")
def _(b):
    _out(b, b.relu(_x(b, 17, 5, 6)))


@case("ops/leakyrelu", "Conv-LeakyRelu(0.1), 5 -> 17")
def _(b):
    _out(b, b.leaky_relu(b.conv(_x(b, 5, 7, 6), 17, 3, pads=1), 0.1))


@case("ops/leakyrelu_on_input", "LeakyRelu(0.3) directly on the input, 33 channels")
def _(b):
    _out(b, b.leaky_relu(_x(b, 33, 5, 4), 0.3))


@case("ops/clip_relu6", "Conv-Clip(0, 6) (ReLU6), 5 -> 17")
def _(b):
    _out(b, b.clip(b.conv(_x(b, 5, 7, 6), 17, 3, pads=1, gain=8.0), 0.0, 6.0))


@case("ops/clip_range", "Clip(-0.5, 0.75) on a conv, 17 -> 5")
def _(b):
    _out(b, b.clip(b.conv(_x(b, 17, 6, 5), 5, 3, pads=1), -0.5, 0.75))


@case("ops/clip_min_only", "Clip with only a minimum (0.25)", min_opset=11)
def _(b):
    _out(b, b.clip(_x(b, 17, 5, 7), 0.25, None))


@case("ops/clip_max_only", "Clip with only a maximum (0.5)", min_opset=11)
def _(b):
    _out(b, b.clip(_x(b, 17, 5, 7), None, 0.5))


@case("ops/prelu_per_channel", "Conv-PRelu with one slope per channel (17, 1, 1)")
def _(b):
    x = b.conv(_x(b, 5, 6, 7), 17, 3, pads=1)
    _out(b, b.prelu(x, b.uniform((17, 1, 1), -0.5, 0.5)))


@case("ops/prelu_scalar", "PRelu with one shared slope, on the input")
def _(b):
    _out(b, b.prelu(_x(b, 33, 5, 6), np.array([0.25])))


# ------------------------------------------------------------------------------------------ Add / Sub / Mul
@case("ops/add_two_inputs", "Add of two model inputs, 17 channels")
def _(b):
    _out(b, b.add(_x(b, 17, 5, 6), _x(b, 17, 5, 6, "x2")))


@case("ops/add_branches", "Add of two convs of the same input, 5 -> 17")
def _(b):
    x = _x(b, 5, 7, 6)
    _out(b, b.add(b.conv(x, 17, 3, pads=1), b.conv(x, 17, 1)))


@case("ops/sub_tensor_tensor", "Conv output minus the input, 5 channels")
def _(b):
    x = _x(b, 5, 7, 6)
    _out(b, b.binary("Sub", b.conv(x, 5, 3, pads=1), x))


@case("ops/mul_tensor_tensor", "Product of two convs of the input, 5 -> 17")
def _(b):
    x = _x(b, 5, 6, 7)
    _out(b, b.binary("Mul", b.conv(x, 17, 3, pads=1, gain=1.0), b.conv(x, 17, 1, gain=1.0)))


@case("ops/add_per_channel_const", "Input plus a per-channel constant (17, 1, 1)")
def _(b):
    _out(b, b.add(_x(b, 17, 5, 6), b.const("c", b.normal((17, 1, 1), 1.0))))


@case("ops/sub_per_channel_const", "Input minus a per-channel constant (1, 17, 1, 1)")
def _(b):
    _out(b, b.binary("Sub", _x(b, 17, 5, 6), b.const("c", b.normal((1, 17, 1, 1), 1.0))))


@case("ops/mul_per_channel_const", "Conv output times a per-channel constant (33, 1, 1)")
def _(b):
    x = b.conv(_x(b, 5, 5, 6), 33, 3, pads=1)
    _out(b, b.binary("Mul", x, b.const("c", b.uniform((33, 1, 1), -2.0, 2.0))))


@case("ops/add_scalar", "Input plus a scalar constant (shape ())")
def _(b):
    _out(b, b.add(_x(b, 5, 6, 7), b.const("c", 0.5)))


@case("ops/sub_scalar_left", "A scalar minus the input (1 - x)")
def _(b):
    _out(b, b.binary("Sub", b.const("c", [1.0]), _x(b, 5, 6, 7)))


@case("ops/mul_scalar", "Conv output times a scalar (shape (1,))")
def _(b):
    _out(b, b.binary("Mul", b.conv(_x(b, 5, 6, 7), 17, 3, pads=1), b.const("c", [0.75])))


@case("ops/add_broadcast_pooled", "Feature map plus its own global average (1, C, 1, 1): tensor-tensor broadcast")
def _(b):
    x = b.conv(_x(b, 5, 7, 9), 17, 3, pads=1)
    _out(b, b.add(x, b.gap(x)))


@case("ops/mul_broadcast_gate", "Squeeze-excite style gate: x * relu(conv1x1(gap(x))), 17 channels")
def _(b):
    x = b.conv(_x(b, 5, 7, 9), 17, 3, pads=1)
    g = b.relu(b.conv(b.relu(b.conv(b.gap(x), 5, 1)), 17, 1, gain=1.0))
    _out(b, b.binary("Mul", x, g))


@case("ops/add_const_full", "Input plus a constant of the full (5, 6, 7) shape")
def _(b):
    _out(b, b.add(_x(b, 5, 6, 7), b.const("c", b.normal((5, 6, 7), 1.0))))


@case("ops/add_const_spatial", "Input plus a (1, 1, 6, 7) constant broadcast over channels")
def _(b):
    _out(b, b.add(_x(b, 17, 6, 7), b.const("c", b.normal((1, 1, 6, 7), 1.0))))


# ------------------------------------------------------------------------------------------ pooling
_POOLS = [
    ("ops/maxpool_2x2", "MaxPool 2x2 stride 2, 17 channels, 8x10", "maxpool", 17, 8, 10, dict(kernel=2)),
    ("ops/maxpool_3x3_s2_pad1", "MaxPool 3x3 stride 2 pad 1 on an odd 11x9 input", "maxpool", 5, 11, 9,
     dict(kernel=3, stride=2, pads=1)),
    ("ops/maxpool_ceil", "MaxPool 3x3 stride 2 ceil_mode, 10x8", "maxpool", 5, 10, 8,
     dict(kernel=3, stride=2, ceil_mode=True)),
    ("ops/maxpool_same_upper", "MaxPool 3x3 stride 2 auto_pad SAME_UPPER, 10x7", "maxpool", 17, 10, 7,
     dict(kernel=3, stride=2, auto_pad="SAME_UPPER")),
    ("ops/maxpool_k1_s2", "MaxPool 1x1 stride 2 (ResNet-50 v2 shortcut subsampling), 9x8", "maxpool", 33, 9, 8,
     dict(kernel=1, stride=2)),
    ("ops/maxpool_rect", "MaxPool 2x3 strides (2, 1) pads left/right 1", "maxpool", 5, 8, 7,
     dict(kernel=(2, 3), stride=(2, 1), pads=[0, 1, 0, 1])),
    ("ops/maxpool_dilated", "MaxPool 2x2 dilation 2 stride 1", "maxpool", 5, 9, 8,
     dict(kernel=2, stride=1, dilations=2)),
    ("ops/avgpool_2x2", "AveragePool 2x2 stride 2, 17 channels, 8x10", "avgpool", 17, 8, 10, dict(kernel=2)),
    ("ops/avgpool_3x3_pad_exclude", "AveragePool 3x3 pad 1 count_include_pad=0", "avgpool", 5, 7, 9,
     dict(kernel=3, stride=1, pads=1, count_include_pad=False)),
    ("ops/avgpool_3x3_pad_include", "AveragePool 3x3 pad 1 count_include_pad=1", "avgpool", 5, 7, 9,
     dict(kernel=3, stride=1, pads=1, count_include_pad=True)),
    ("ops/avgpool_s2_pad_include", "AveragePool 3x3 stride 2 pad 1 count_include_pad=1, odd 9x11, 33 ch",
     "avgpool", 33, 9, 11, dict(kernel=3, stride=2, pads=1, count_include_pad=True)),
    ("ops/avgpool_ceil", "AveragePool 3x3 stride 2 ceil_mode (partial last windows), 10x8", "avgpool", 5, 10, 8,
     dict(kernel=3, stride=2, ceil_mode=True)),
    ("ops/avgpool_same_upper", "AveragePool 2x2 stride 2 auto_pad SAME_UPPER on odd 7x9", "avgpool", 17, 7, 9,
     dict(kernel=2, stride=2, auto_pad="SAME_UPPER")),
]
for _name, _desc, _op, _c, _h, _w, _kw in _POOLS:
    def _pool_case(b, op=_op, c=_c, h=_h, w=_w, kw=_kw):
        _out(b, getattr(b, op)(_x(b, c, h, w), **kw))
    _needs10 = _kw.get("ceil_mode") or _kw.get("dilations", 1) != 1
    case(_name, _desc, min_opset=10 if _needs10 else 9)(_pool_case)


@case("ops/globalavgpool_17ch", "GlobalAveragePool, 17 channels, 7x9")
def _(b):
    _out(b, b.gap(_x(b, 17, 7, 9)))


@case("ops/globalavgpool_large", "GlobalAveragePool over 48x56 (2,688 values: averaged along W, then H)")
def _(b):
    _out(b, b.gap(_x(b, 5, 48, 56)))


@case("ops/avgpool_large_window", "AveragePool 44x50 stride (1, 7) pads 3 on W, count_include_pad=0 (two passes)")
def _(b):
    _out(b, b.avgpool(_x(b, 5, 44, 64), kernel=(44, 50), stride=(1, 7), pads=[0, 3, 0, 3], count_include_pad=False))


@case("ops/globalavgpool_gemm", "Conv-Relu-GlobalAveragePool-Flatten-Gemm (a classifier tail)")
def _(b):
    x = b.gap(b.relu(b.conv(_x(b, 5, 9, 7), 33, 3, pads=1)))
    x = b.flatten(x)
    b.channels[x] = 33
    _out(b, b.gemm(x, 10, gain=1.0, name="head"), "logits")
    return "head"


# ------------------------------------------------------------------------------------------ Concat / Split
@case("ops/concat_aligned_32", "Concat of two 32-channel convs (aligned to 8, 16 and 32)")
def _(b):
    x = _x(b, 5, 6, 7)
    _out(b, b.concat([b.conv(x, 32, 3, pads=1), b.conv(x, 32, 1)]))


@case("ops/concat_aligned_8", "Concat of 16 and 8 channels (aligned to 8 only)")
def _(b):
    x = _x(b, 5, 6, 7)
    _out(b, b.concat([b.conv(x, 16, 3, pads=1), b.conv(x, 8, 1)]))


@case("ops/concat_unaligned", "Concat of 5 + 17 channels and the 3-channel input")
def _(b):
    x = _x(b, 3, 7, 6)
    _out(b, b.concat([b.conv(x, 5, 3, pads=1), b.conv(x, 17, 1), x]))


@case("ops/split_aligned", "Split 64 channels into 32 + 32, each through its own conv")
def _(b):
    p, q = b.split(b.conv(_x(b, 5, 6, 7), 64, 1), [32, 32])
    _out(b, b.conv(p, 5, 3, pads=1), "y0")
    _out(b, b.conv(q, 5, 1), "y1")


@case("ops/split_unaligned", "Split 33 input channels into 17 + 16, both outputs")
def _(b):
    p, q = b.split(_x(b, 33, 5, 6), [17, 16])
    _out(b, p, "y0")
    _out(b, q, "y1")


@case("ops/split_three_uneven", "Split 17 channels into 5 + 7 + 5 after a conv")
def _(b):
    outs = b.split(b.conv(_x(b, 5, 5, 6), 17, 3, pads=1), [5, 7, 5])
    for i, t in enumerate(outs):
        _out(b, t, f"y{i}")


@case("ops/split_second_half", "YOLO route: Split in two halves, keep only the second, then conv")
def _(b):
    _, q = b.split(b.conv(_x(b, 5, 6, 7), 34, 3, pads=1), [17, 17])
    _out(b, b.conv(q, 17, 3, pads=1))


@case("ops/split_concat_swap", "Split 5 + 12 then Concat in swapped order (a channel permutation)")
def _(b):
    p, q = b.split(b.conv(_x(b, 3, 6, 5), 17, 3, pads=1), [5, 12])
    _out(b, b.concat([q, p]))


@case("ops/split_equal_default", "Split without sizes: two equal halves of 34 channels")
def _(b):
    x = _x(b, 34, 5, 4)
    outs = (b.node("Split", [x], n_outputs=2, axis=1, num_outputs=2) if b.opset >= 18
            else b.node("Split", [x], n_outputs=2, axis=1))
    _out(b, outs[0], "y0")
    _out(b, outs[1], "y1")


# ------------------------------------------------------------------------------------------ Pad
@case("ops/pad_constant", "Pad with zeros, asymmetric (top 1, left 2, bottom 2, right 1)")
def _(b):
    _out(b, b.pad(_x(b, 5, 7, 9), [0, 0, 1, 2, 0, 0, 2, 1]))


@case("ops/pad_constant_value", "Pad with 0.5 then a valid conv")
def _(b):
    _out(b, b.conv(b.pad(_x(b, 5, 6, 7), [0, 0, 1, 1, 0, 0, 1, 1], value=0.5), 17, 3))


@case("ops/pad_edge", "Pad by edge replication (top 2, left 1, bottom 1, right 2)")
def _(b):
    _out(b, b.pad(_x(b, 17, 6, 5), [0, 0, 2, 1, 0, 0, 1, 2], mode="edge"))


@case("ops/pad_reflect", "Pad by reflection (top 1, left 2, bottom 2, right 1)")
def _(b):
    _out(b, b.pad(_x(b, 5, 7, 6), [0, 0, 1, 2, 0, 0, 2, 1], mode="reflect"))


@case("ops/pad_then_conv_stride2", "Zero Pad top/left then a valid stride-2 conv (Keras downsampling)")
def _(b):
    _out(b, b.conv(b.pad(_x(b, 5, 10, 12), [0, 0, 1, 1, 0, 0, 0, 0]), 17, 3, stride=2))


# ------------------------------------------------------------------------------------------ Resize / Upsample
_RESIZES = [
    ("ops/resize_nearest_asymmetric_floor", "Resize nearest x2, asymmetric, floor (TF / YOLO upsampling)",
     dict(scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    ("ops/resize_nearest_half_pixel", "Resize nearest x2, half_pixel, round_prefer_floor",
     dict(scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="half_pixel",
          nearest_mode="round_prefer_floor")),
    ("ops/resize_nearest_scales_3x2", "Resize nearest scales (3, 2), asymmetric, floor",
     dict(scales=[1, 1, 3, 2], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    ("ops/resize_nearest_round_prefer_ceil", "Resize nearest to 11x14 (x1.57), half_pixel, round_prefer_ceil",
     dict(sizes=[1, 5, 11, 14], mode="nearest", coordinate_transformation_mode="half_pixel",
          nearest_mode="round_prefer_ceil")),
    ("ops/resize_nearest_ceil", "Resize nearest to 11x14, asymmetric, ceil",
     dict(sizes=[1, 5, 11, 14], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="ceil")),
    ("ops/resize_nearest_align_corners", "Resize nearest to 13x17, align_corners, round_prefer_floor",
     dict(sizes=[1, 5, 13, 17], mode="nearest", coordinate_transformation_mode="align_corners",
          nearest_mode="round_prefer_floor")),
    ("ops/resize_nearest_pytorch_half_pixel", "Resize nearest to 11x14, pytorch_half_pixel, floor",
     dict(sizes=[1, 5, 11, 14], mode="nearest", coordinate_transformation_mode="pytorch_half_pixel",
          nearest_mode="floor")),
    ("ops/resize_linear_half_pixel", "Resize linear x2, half_pixel",
     dict(scales=[1, 1, 2, 2], mode="linear", coordinate_transformation_mode="half_pixel")),
    ("ops/resize_linear_asymmetric", "Resize linear x2, asymmetric",
     dict(scales=[1, 1, 2, 2], mode="linear", coordinate_transformation_mode="asymmetric")),
    ("ops/resize_linear_align_corners", "Resize linear to 13x17, align_corners",
     dict(sizes=[1, 5, 13, 17], mode="linear", coordinate_transformation_mode="align_corners")),
    ("ops/resize_linear_pytorch_half_pixel", "Resize linear to 11x1, pytorch_half_pixel (differs from half_pixel "
     "at size 1)", dict(sizes=[1, 5, 11, 1], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    ("ops/resize_linear_downscale", "Resize linear x0.5 (downscaling), half_pixel",
     dict(scales=[1, 1, 0.5, 0.5], mode="linear", coordinate_transformation_mode="half_pixel")),
]
for _name, _desc, _kw in _RESIZES:
    def _resize_case(b, kw=_kw):
        _out(b, b.resize(b.conv(_x(b, 3, 7, 9), 5, 3, pads=1), **kw))
    case(_name, _desc + " after a 3 -> 5 conv on 7x9", min_opset=11)(_resize_case)


@case("ops/resize_nearest_opset10", "Resize (opset 10) nearest x2 after a conv", default_opset=10,
      min_opset=10)
def _(b):
    _out(b, b.resize(b.conv(_x(b, 3, 7, 9), 5, 3, pads=1), scales=[1, 1, 2, 2], mode="nearest"))


@case("ops/resize_linear_opset10", "Resize (opset 10) linear x2 after a conv", default_opset=10, min_opset=10)
def _(b):
    _out(b, b.resize(b.conv(_x(b, 3, 7, 9), 5, 3, pads=1), scales=[1, 1, 2, 2], mode="linear"))


@case("ops/upsample_nearest", "Upsample (opset 9) nearest x2 after a conv", default_opset=9, max_opset=9)
def _(b):
    _out(b, b.resize(b.conv(_x(b, 3, 7, 9), 5, 3, pads=1), scales=[1, 1, 2, 2], mode="nearest"))


@case("ops/upsample_linear", "Upsample (opset 9) linear x2 after a conv", default_opset=9, max_opset=9)
def _(b):
    _out(b, b.resize(b.conv(_x(b, 3, 7, 9), 5, 3, pads=1), scales=[1, 1, 2, 2], mode="linear"))


# ------------------------------------------------------------------------------------------ shapes
def _classifier_tail(b, x, features, name="head"):
    b.channels[x] = features
    _out(b, b.gemm(x, 10, gain=1.0, name=name), "logits")
    return name


@case("ops/flatten_gemm", "Conv-Relu-Flatten-Gemm over a 4x3 map (17 x 12 features)")
def _(b):
    x = b.flatten(b.relu(b.conv(_x(b, 5, 4, 3), 17, 3, pads=1)))
    return _classifier_tail(b, x, 17 * 12)


@case("ops/reshape_gemm", "Conv-Relu-Reshape(1, -1)-Gemm")
def _(b):
    x = b.reshape(b.relu(b.conv(_x(b, 5, 3, 5), 17, 3, pads=1)), [1, -1])
    return _classifier_tail(b, x, 17 * 15)


@case("ops/reshape_shape_arith", "PyTorch-style flatten: Shape-Gather-Unsqueeze-Concat-Reshape, then Gemm")
def _(b):
    x = b.relu(b.conv(_x(b, 5, 3, 5), 17, 3, pads=1))
    shape = b.node("Shape", [x])
    batch = b.node("Gather", [shape, b.const("zero", np.array(0), dtype=np.int64)], axis=0)
    batch = b.unsqueeze(batch, [0])
    target = b.node("Concat", [batch, b.const("minus_one", np.array([-1]), dtype=np.int64)], axis=0)
    x = b.node("Reshape", [x, target])
    return _classifier_tail(b, x, 17 * 15)


@case("ops/squeeze_unsqueeze", "GlobalAveragePool-Squeeze-Gemm-Unsqueeze, output (1, 17, 1, 1)")
def _(b):
    x = b.squeeze(b.gap(b.conv(_x(b, 5, 6, 7), 33, 3, pads=1)), [2, 3])
    b.channels[x] = 33
    _out(b, b.unsqueeze(b.gemm(x, 17), [2, 3]))


@case("ops/transpose_nhwc_io", "NHWC input and output around a conv (tf2onnx style Transposes)")
def _(b):
    x = b.input("x", [1, 7, 9, 5], layout="NHWC")
    x = b.transpose(x, [0, 3, 1, 2])
    b.channels[x] = 5
    _out(b, b.transpose(b.relu(b.conv(x, 17, 3, pads=1)), [0, 2, 3, 1]))


@case("ops/transpose_hw", "Transpose swapping H and W (real data movement), then a conv")
def _(b):
    x = b.transpose(_x(b, 5, 6, 9), [0, 1, 3, 2])
    b.channels[x] = 5
    _out(b, b.conv(x, 17, 3, pads=1))


@case("ops/reshape_channels_to_rows", "Reshape (1, 8, 6, 5) -> (1, 4, 12, 5) (not a relabelling), then a conv")
def _(b):
    x = b.reshape(b.conv(_x(b, 3, 6, 5), 8, 3, pads=1), [1, 4, 12, 5])
    b.channels[x] = 4
    _out(b, b.conv(x, 5, 1))


@case("ops/identity_dropout", "Conv-Identity-Dropout-Relu-Identity (both are no-ops in inference)")
def _(b):
    x = b.unary("Identity", b.conv(_x(b, 5, 6, 7), 17, 3, pads=1))
    _out(b, b.unary("Identity", b.relu(b.dropout(x, 0.3))))


@case("ops/dropout_mask_unused", "Conv-Dropout-Relu with the mask output named but unread (older exporters), opsets 9 to 11",
      default_opset=9, max_opset=11)
def _(b):
    x = b.conv(_x(b, 5, 6, 7), 17, 3, pads=1)
    y, _mask = b.node("Dropout", [x], n_outputs=2, name="dropout", ratio=0.3)
    b.channels[y] = 17
    _out(b, b.relu(y))


@case("ops/depth_to_space", "Conv 5 -> 12, DepthToSpace 2 (DCR; CRD from opset 11) then a conv, 5x7", min_opset=11)
def _(b):
    x = b.conv(_x(b, 5, 5, 7), 12, 3, pads=1)
    y = b.node("DepthToSpace", [x], name="d2s", blocksize=2, mode="CRD")
    b.channels[y] = 3
    _out(b, b.conv(y, 5, 3, pads=1))


@case("ops/constant_subgraphs", "Conv whose weights, bias and a scale come from Constant, Reshape, Cast, "
      "ConstantOfShape, Concat and Slice subgraphs (all foldable)", min_opset=11)
def _(b):
    from onnx import helper, numpy_helper
    x = _x(b, 5, 6, 7)
    w = b.normal((17 * 5 * 3 * 3,), np.sqrt(2 / 45))
    flat = b.node("Constant", [], value=numpy_helper.from_array(w, "w_flat"))
    head = b.node("Constant", [], value=numpy_helper.from_array(np.array([17], np.int64), "w_head"))
    tail = b.node("Constant", [], value=numpy_helper.from_array(np.array([5, 3, 3, 99], np.int64), "w_tail"))
    tail = b.node("Slice", [tail, b.const("s0", [0], np.int64), b.const("s1", [3], np.int64)])
    shape = b.node("Concat", [head, tail], axis=0)
    weights = b.node("Reshape", [flat, shape])
    bias = b.node("ConstantOfShape", [b.const("bias_shape", [17], np.int64)],
                  value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.125]))
    y = b.node("Conv", [x, weights, bias], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    scale = b.node("Cast", [b.const("scale_int", np.full((17, 1, 1), 2), np.int64)], to=onnx.TensorProto.FLOAT)
    _out(b, b.node("Mul", [y, scale]))


@case("ops/sigmoid", "Conv-Sigmoid-Conv: the Sigmoid as SIMD post-ops of the first conv")
def _(b):
    x = b.unary("Sigmoid", b.conv(_x(b, 5, 7, 6), 17, 3, pads=1))
    _out(b, b.conv(x, 5, 3, pads=1, gain=4.0))


# ------------------------------------------------------------------------------------------ host fallback
@case("host/softmax", "Conv-GlobalAveragePool-Gemm-Softmax: the Softmax runs on the host")
def _(b):
    x = b.flatten(b.gap(b.relu(b.conv(_x(b, 3, 9, 7), 17, 3, pads=1))))
    b.channels[x] = 17
    _out(b, b.unary("Softmax", b.gemm(x, 10, gain=1.0), axis=1), "probabilities")


@case("host/softsign", "Conv-Softsign-Conv: the Softsign runs on the host between accelerator layers")
def _(b):
    x = b.unary("Softsign", b.conv(_x(b, 5, 7, 6), 17, 3, pads=1))
    _out(b, b.conv(x, 5, 3, pads=1, gain=4.0))


@case("ops/tanh", "Conv-Tanh-Conv: the Tanh as SIMD post-ops of the first conv")
def _(b):
    x = b.unary("Tanh", b.conv(_x(b, 5, 6, 7), 17, 3, pads=1))
    _out(b, b.conv(x, 5, 3, pads=1))


@case("host/lrn", "Conv-Relu-LRN(5)-Conv (AlexNet style): the LRN runs on the host")
def _(b):
    x = b.relu(b.conv(_x(b, 3, 9, 8), 17, 3, pads=1))
    x = b.unary("LRN", x, size=5, alpha=1e-4, beta=0.75, bias=1.0)
    _out(b, b.conv(x, 5, 3, pads=1))


@case("host/squeeze_excite", "Squeeze-excite with a Softsign gate: host op in the middle of a broadcast Mul")
def _(b):
    x = b.relu(b.conv(_x(b, 5, 7, 9), 17, 3, pads=1))
    g = b.unary("Softsign", b.conv(b.relu(b.conv(b.gap(x), 5, 1)), 17, 1))
    _out(b, b.binary("Mul", x, g))


# ------------------------------------------------------------------------------------------ not compilable
# Valid ONNX that onnxruntime runs, but a weight-stationary accelerator cannot: the compiler must
# refuse them with an error naming the node (or run them on the host).
@case("bad/conv_weights_not_constant", "Conv whose weights are a model input, not a constant")
def _(b):
    x = _x(b, 5, 6, 7)
    w = b.input("w", [17, 5, 3, 3], layout="OIHW")
    _out(b, b.node("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))


@case("bad/matmul_no_constant", "MatMul of two model inputs (no constant operand)")
def _(b):
    x = b.input("x", [1, 33])
    w = b.input("w", [33, 17], layout="CN")
    _out(b, b.node("MatMul", [x, w]))


@case("bad/gemm_weights_not_constant", "Gemm whose B operand is a model input", min_opset=11)
def _(b):
    x = b.input("x", [1, 33])
    w = b.input("w", [17, 33], layout="NC")
    _out(b, b.node("Gemm", [x, w], transB=1))


# ------------------------------------------------------------------------------------------ small CNNs
@case("cnn/tiny", "Conv-BN-Relu-MaxPool-Conv-BN-Relu-GAP-Gemm, 3 -> 17 -> 33 channels, 16x12 input, 10 classes")
def _(b):
    x = b.relu(b.bn(b.conv(_x(b, 3, 16, 12), 17, 3, pads=1)))
    x = b.maxpool(x, 2)
    x = b.relu(b.bn(b.conv(x, 33, 3, pads=1)))
    x = b.flatten(b.gap(x))
    return _classifier_tail(b, x, 33)


@case("cnn/odd_mixed", "Stride-2 conv, BN, LeakyRelu, depthwise, ReLU6, Split/Concat, nearest upsampling, "
      "average pool and a residual Add on an odd 15x11 input with 5 channels")
def _(b):
    x = _x(b, 5, 15, 11)
    x = b.leaky_relu(b.bn(b.conv(x, 17, 3, stride=2, pads=1, bias=False)), 0.1)         # 8x6
    y = b.clip(b.bn(b.conv(x, 17, 3, pads=1, group=17, bias=False)), 0.0, 6.0)
    p, q = b.split(y, [5, 12])
    q = b.relu(b.bn(b.conv(q, 12, 3, pads=1, bias=False)))
    y = b.concat([q, p])
    y = b.bn(b.conv(y, 17, 1, bias=False, gain=1.0))
    x = b.add(x, y)                                                                      # residual
    small = b.relu(b.bn(b.conv(b.maxpool(x, 2), 33, 3, pads=1, bias=False)))           # 4x3
    up = b.resize(small, scales=[1, 1, 2, 2], mode="nearest", nearest_mode="floor" if b.opset >= 11 else None)
    x = b.concat([x, up])                                                                # 17 + 33
    x = b.avgpool(x, 3, 1, pads=1, count_include_pad=False)
    _out(b, b.conv(x, 5, 1, gain=1.0))


@case("cnn/nhwc_keras_style", "Keras-style export: NHWC input with Transpose, explicit Pad before stride-2 convs, "
      "ReLU6, GlobalAveragePool, Dense with transB=0")
def _(b):
    x = b.input("input_1", [1, 20, 14, 3], layout="NHWC")
    x = b.transpose(x, [0, 3, 1, 2])
    b.channels[x] = 3
    x = b.clip(b.bn(b.conv(b.pad(x, [0, 0, 0, 0, 0, 0, 1, 1]), 17, 3, stride=2, bias=False)))
    x = b.clip(b.bn(b.conv(x, 33, 3, pads=1, bias=False)))
    x = b.clip(b.bn(b.conv(b.pad(x, [0, 0, 0, 0, 0, 0, 1, 1]), 33, 3, stride=2, bias=False)))
    x = b.flatten(b.gap(x))
    b.channels[x] = 33
    _out(b, b.gemm(x, 10, gain=1.0, trans_b=False, name="dense"), "dense")
    return "dense"
