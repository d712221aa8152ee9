"""Classic classifiers as the ONNX model zoo's early files spell them (Caffe and Caffe2 exports at
opsets 7 to 9): SqueezeNet 1.0, Inception v1 (BVLC GoogLeNet), and VGG-19's classifier.

What those exporters wrote and later ones do not: Dropout with its mask output named (and read by
nothing), LRN after the first convolutions, Caffe's ceil-mode pooling written as an extra pad on
the bottom and right, Softmax over a 4-D tensor (opsets before 13 flatten from axis 1), a Reshape
whose shape is an initializer, Gemm with ``transB``. Built with ``onnx.helper`` (no download),
random He-scaled weights from one seeded generator (so a build is deterministic) and any input
size the pooling allows (the zoo's is 224).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from systolix.models._graph import ModelBuildError

MIN_OPSET, MAX_OPSET, DEFAULT_OPSET = 7, 11, 8


class _Net:
    """Nodes and initializers of one graph, the channels and spatial size of the running tensor."""

    def __init__(self, name: str, opset: int, seed: int, size: int):
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise ModelBuildError(f"{name}: opset {opset} is outside {MIN_OPSET}..{MAX_OPSET} (the zoo's early files)")
        self.name, self.opset, self.size = name, opset, size
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        return outputs[0]

    def conv_relu(self, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, pad: int = 0) -> str:
        w = self.rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(np.sqrt(2.0 / (cin * k * k)))
        b = self.rng.normal(0, 0.05, cout).astype(np.float32)
        y = self.node("Conv", [x, self.const(f"{name}_w", w), self.const(f"{name}_b", b)], [name], name,
                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1)
        return self.node("Relu", [y], [f"{name}_relu"], f"{name}_relu")

    def ceil_pool(self, x: str, size: int, name: str, op: str = "MaxPool") -> tuple[str, int]:
        """A 3x3 stride-2 pool with Caffe's ceil mode: one more row and column of padding at the
        bottom and right where the floor would drop a partial window."""
        if size < 3:
            raise ModelBuildError(f"{self.name}: the input is too small ({self.size}): {name} pools a {size}x{size} map")
        extra = (size - 3) % 2
        out = (size + extra - 3) // 2 + 1
        return self.node(op, [x], [name], name, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, extra, extra]), out

    def lrn(self, x: str, name: str) -> str:
        return self.node("LRN", [x], [name], name, size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def dropout(self, x: str, ratio: float, name: str) -> str:
        # The mask output is named, as the zoo's files name it, and nothing reads it.
        return self.node("Dropout", [x], [name, f"{name}_mask"], name, ratio=ratio)

    def model(self, in_shape: list[int], out: str, out_shape: list[int]) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="systolix.models")
        m.ir_version = 4 if self.opset <= 9 else 5
        return m


def _fire(net: _Net, x: str, cin: int, squeeze: int, expand: int, name: str) -> tuple[str, int]:
    s = net.conv_relu(x, cin, squeeze, 1, f"{name}/squeeze1x1")
    e1 = net.conv_relu(s, squeeze, expand, 1, f"{name}/expand1x1")
    e3 = net.conv_relu(s, squeeze, expand, 3, f"{name}/expand3x3", pad=1)
    return net.node("Concat", [e1, e3], [f"{name}/concat"], f"{name}/concat", axis=1), 2 * expand


def squeezenet10_zoo(opset: int = DEFAULT_OPSET, seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """SqueezeNet 1.0 (Iandola et al.) as the zoo's ``squeezenet1.0-7/8/9``: conv 7x7/2, fire
    modules 2 to 9 with ceil-mode max pools after conv1, fire4 and fire8, Dropout 0.5 (mask
    named), conv10 to the classes, ReLU, global average pool, Softmax over ``[1, classes, 1, 1]``."""
    net = _Net("squeezenet1.0", opset, seed, size)
    x = net.conv_relu("data_0", 3, 96, 7, "conv1", stride=2)
    h = (size - 7) // 2 + 1
    x, h = net.ceil_pool(x, h, "pool1")
    c = 96
    fires = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192), 7: (48, 192), 8: (64, 256), 9: (64, 256)}
    for k, (sq, ex) in fires.items():
        x, c = _fire(net, x, c, sq, ex, f"fire{k}")
        if k in (4, 8):
            x, h = net.ceil_pool(x, h, f"pool{k}")
    x = net.dropout(x, 0.5, "drop9")
    x = net.conv_relu(x, c, classes, 1, "conv10")
    x = net.node("GlobalAveragePool", [x], ["pool10"], "pool10")
    out = net.node("Softmax", [x], ["softmaxout_1"], "softmax")
    return net.model([1, 3, size, size], out, [1, classes, 1, 1])


INCEPTIONS = {  # name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}


def _inception(net: _Net, x: str, cin: int, name: str) -> tuple[str, int]:
    c1, r3, c3, r5, c5, cp = INCEPTIONS[name]
    p = f"inception_{name}"
    b1 = net.conv_relu(x, cin, c1, 1, f"{p}/1x1")
    b3 = net.conv_relu(net.conv_relu(x, cin, r3, 1, f"{p}/3x3_reduce"), r3, c3, 3, f"{p}/3x3", pad=1)
    b5 = net.conv_relu(net.conv_relu(x, cin, r5, 1, f"{p}/5x5_reduce"), r5, c5, 5, f"{p}/5x5", pad=2)
    pool = net.node("MaxPool", [x], [f"{p}/pool"], f"{p}/pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    bp = net.conv_relu(pool, cin, cp, 1, f"{p}/pool_proj")
    return net.node("Concat", [b1, b3, b5, bp], [f"{p}/output"], f"{p}/output", axis=1), c1 + c3 + c5 + cp


def inception_v1_zoo(opset: int = DEFAULT_OPSET, seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """Inception v1 (BVLC GoogLeNet) as the zoo's ``inception-v1-7/8/9``: conv 7x7/2, ceil-mode
    max pool, LRN, conv 1x1 and 3x3, LRN, max pool, inception 3a-3b, pool, 4a-4e, pool, 5a-5b,
    an average pool over the whole map, Dropout 0.4 (mask named), Reshape to ``[1, 1024]`` by an
    initializer, Gemm (``transB``), Softmax."""
    net = _Net("inception_v1", opset, seed, size)
    x = net.conv_relu("data_0", 3, 64, 7, "conv1/7x7_s2", stride=2, pad=3)
    h = (size + 6 - 7) // 2 + 1
    x, h = net.ceil_pool(x, h, "pool1/3x3_s2")
    x = net.lrn(x, "pool1/norm1")
    x = net.conv_relu(x, 64, 64, 1, "conv2/3x3_reduce")
    x = net.conv_relu(x, 64, 192, 3, "conv2/3x3", pad=1)
    x = net.lrn(x, "conv2/norm2")
    x, h = net.ceil_pool(x, h, "pool2/3x3_s2")
    c = 192
    for name in INCEPTIONS:
        x, c = _inception(net, x, c, name)
        if name in ("3b", "4e"):
            x, h = net.ceil_pool(x, h, f"pool{name[0]}/3x3_s2")
    x = net.node("AveragePool", [x], ["pool5/7x7_s1"], "pool5/7x7_s1", kernel_shape=[h, h], strides=[1, 1], pads=[0, 0, 0, 0])
    x = net.dropout(x, 0.4, "pool5/drop_7x7_s1")
    x = net.node("Reshape", [x, net.const("OC2_DUMMY_0", np.array([1, c], np.int64))], ["OC2_DUMMY_1"], "reshape")
    w = net.rng.standard_normal((classes, c), dtype=np.float32) * np.float32(np.sqrt(1.0 / c))
    x = net.node("Gemm", [x, net.const("loss3/classifier_w", w), net.const("loss3/classifier_b", np.zeros(classes, np.float32))],
                 ["loss3/classifier"], "loss3/classifier", transB=1)
    out = net.node("Softmax", [x], ["prob_1"], "prob")
    return net.model([1, 3, size, size], out, [1, classes])


def vgg19_classifier(opset: int = DEFAULT_OPSET, seed: int = 0, classes: int = 1000) -> onnx.ModelProto:
    """VGG-19's classifier from its last pooled map ``[1, 512, 7, 7]``: Flatten, fc6 25088 ->
    4096, ReLU, Dropout, fc7 4096 -> 4096, ReLU, Dropout, fc8 -> classes (Gemm, ``transB``).
    fc6 alone is 102.8 M weights: 6.42 M vectors of 16, three times the ``ultra96v2`` preset's
    DRAM1; the compiler splits it by output channels."""
    net = _Net("vgg19_classifier", opset, seed, 7)
    x = net.node("Flatten", ["data_0"], ["flatten"], "flatten", axis=1)
    cin = 512 * 7 * 7
    for k, cout in ((6, 4096), (7, 4096), (8, classes)):
        w = net.rng.standard_normal((cout, cin), dtype=np.float32) * np.float32(np.sqrt(2.0 / cin))
        x = net.node("Gemm", [x, net.const(f"fc{k}_w", w), net.const(f"fc{k}_b", np.zeros(cout, np.float32))], [f"fc{k}"], f"fc{k}",
                     transB=1)
        if k < 8:
            x = net.dropout(net.node("Relu", [x], [f"relu{k}"], f"relu{k}"), 0.5, f"drop{k}")
        cin = cout
    return net.model([1, 512, 7, 7], x, [1, classes])
