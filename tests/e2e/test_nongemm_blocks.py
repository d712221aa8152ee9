"""Blocks of three networks whose non-GEMM ops used to need the host, built as torch modules
(random weights; batch-norm statistics fitted to random inputs) and exported with torch's ONNX
exporter: YOLOv5 (Conv-BN-SiLU, a C3 bottleneck with its residual add and concat, SPPF's three
max pools), EfficientNet's MBConv (expand and depthwise Conv-BN-SiLU, squeeze-excite with SiLU
and a Sigmoid gate multiplying the feature map per channel, project, residual) and MobileNetV3's
(HardSwish, squeeze-excite with ReLU and a HardSigmoid gate), the last at opset 17 (HardSwish,
HardSigmoid ops) and 13 (HardSwish as ``Mul(x, HardSigmoid(x))``), and YOLOv4's Conv-BN-Mish
(torch writes ``Mul(x, Tanh(Softplus(x)))`` even at opset 18; ``tests/unit/test_mish.py`` has the
Mish op). Each compiles for ``ultra96v2``
with no host and agrees with onnxruntime within the error model's bound on the emulator."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import systolix
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def conv_bn(ci, co, k=1, stride=1, groups=1, act=nn.SiLU):
    layers = [nn.Conv2d(ci, co, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(co)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cv1, self.cv2 = conv_bn(c, c, 1), conv_bn(c, c, 3)

    def forward(self, x):
        return x + self.cv2(self.cv1(x))


class C3(nn.Module):
    def __init__(self, ci, co):
        super().__init__()
        h = co // 2
        self.cv1, self.cv2, self.cv3, self.m = conv_bn(ci, h), conv_bn(ci, h), conv_bn(2 * h, co), Bottleneck(h)

    def forward(self, x):
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, ci, co):
        super().__init__()
        h = ci // 2
        self.cv1, self.cv2, self.m = conv_bn(ci, h), conv_bn(4 * h, co), nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class YoloV5Block(nn.Module):
    """A stride-2 Conv-BN-SiLU stem, C3, SPPF (YOLOv5's backbone end, narrow)."""

    def __init__(self):
        super().__init__()
        self.stem, self.c3, self.sppf = conv_bn(3, 16, 3, 2), C3(16, 32), SPPF(32, 32)

    def forward(self, x):
        return self.sppf(self.c3(self.stem(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c, r, act, gate):
        super().__init__()
        self.pool, self.fc1, self.act, self.fc2, self.gate = nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), act(), nn.Conv2d(r, c, 1), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class InvertedResidual(nn.Module):
    """EfficientNet's MBConv (SiLU, Sigmoid gate) or MobileNetV3's block (HardSwish, ReLU and a
    HardSigmoid gate): expand, depthwise, squeeze-excite, project, residual."""

    def __init__(self, c=16, expand=4, act=nn.SiLU, se_act=nn.SiLU, gate=nn.Sigmoid):
        super().__init__()
        h = c * expand
        self.expand, self.dw = conv_bn(c, h, 1, act=act), conv_bn(h, h, 3, groups=h, act=act)
        self.se = SqueezeExcite(h, c // 4, se_act, gate)
        self.project = conv_bn(h, c, 1, act=None)

    def forward(self, x):
        return x + self.project(self.se(self.dw(self.expand(x))))


class ConvBnMish(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = conv_bn(8, 16, 3, act=nn.Mish), conv_bn(16, 16, 3, act=nn.Mish)

    def forward(self, x):
        return self.b(self.a(x))


BLOCKS = {
    "yolov5": (YoloV5Block, (1, 3, 16, 16), 17),
    "efficientnet_mbconv": (InvertedResidual, (1, 16, 8, 8), 17),
    "mobilenetv3": (lambda: InvertedResidual(act=nn.Hardswish, se_act=nn.ReLU, gate=nn.Hardsigmoid), (1, 16, 8, 8), 17),
    "mobilenetv3_opset13": (lambda: InvertedResidual(act=nn.Hardswish, se_act=nn.ReLU, gate=nn.Hardsigmoid), (1, 16, 8, 8), 13),
    "yolov4_mish": (ConvBnMish, (1, 8, 8, 8), 17),
}


def exported(name: str) -> onnx.ModelProto:
    make, shape, opset = BLOCKS[name]
    torch.manual_seed(0)
    module = make()
    module.train()
    for bn in module.modules():
        if isinstance(bn, nn.BatchNorm2d):
            bn.momentum = None  # a plain average of the batches' statistics
    with torch.no_grad():
        for _ in range(3):
            module(torch.randn(8, *shape[1:]))
    module.eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, torch.randn(*shape), buf, input_names=["x"], output_names=["y"], opset_version=opset, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_compiles_with_no_host_within_the_bound(name):
    model = exported(name)
    ops = {n.op_type for n in model.graph.node}
    expected = {"yolov5": {"Sigmoid", "Mul", "Add", "Concat", "MaxPool"},
                "efficientnet_mbconv": {"Sigmoid", "Mul", "GlobalAveragePool", "Add"},
                "mobilenetv3": {"HardSwish", "HardSigmoid", "Relu", "Mul", "GlobalAveragePool", "Add"},
                "mobilenetv3_opset13": {"HardSigmoid", "Relu", "Mul", "GlobalAveragePool", "Add"},
                "yolov4_mish": {"Softplus", "Tanh", "Mul"}}[name]
    assert expected <= ops, ops  # the export holds the ops the block is about
    if "mbconv" in name or "mobilenetv3" in name:  # the squeeze-excite gate multiplies per channel group
        kinds = [p.kind for layer in ir_of(model, "ultra96v2").layers for p in layer.post_ops]
        assert kinds.count("mul_bcast") == 1, kinds
    compiled = systolix.compile(model, "ultra96v2", host=False)
    x = np.random.default_rng(1).normal(0, 1, BLOCKS[name][1]).astype(np.float32)
    ours = compiled.run({"x": x})["y"]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err, bound = float(np.max(np.abs(ours - ref))), output_bounds(model, {"x": x})["y"]
    print(f"{name}: largest error {err * 256:.2f} LSB, {err / bound:.0%} of its bound")
    assert err <= bound
