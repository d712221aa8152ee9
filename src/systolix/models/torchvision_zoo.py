"""A zoo of real architectures, from their published definitions, with random weights.

Each builder makes the model with torchvision's own constructor (``weights=None``; for
segmentation also ``weights_backbone=None``) or, for the U-Net with transposed convolutions and
the YOLO-style detector, a small ``torch.nn`` module written here, at a fixed torch seed. Random
weights leave batch norms' running statistics at 0 and 1, so activations would grow layer after
layer; a few forward passes in train mode on seeded image-like inputs fit them (cumulative
averages), so that activations sit at a sane scale, as in a trained network. The model is then
exported in eval mode with torch's legacy TorchScript exporter (``dynamo=False``) at opset 17.

``build_zoo(name, size)`` returns the ``onnx.ModelProto`` for a ``1 x 3 x size x size`` input;
``ZOO`` lists the models with their published input size and the smallest the architecture
allows. torch and torchvision are the ``dev`` extra; without them the builders raise
``ModelBuildError`` saying so.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx

from systolix.models._graph import ModelBuildError
from systolix.models.inputs import image_like

OPSET = 17
SEED = 0
# Forward passes in train mode that fit the batch norms' running statistics, and their batch.
FIT_PASSES = 4
FIT_BATCH = 4


def _torch():
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:  # pragma: no cover - torch is a test dependency
        raise ModelBuildError(f"the zoo models are built with torch and torchvision ({e.name} is missing): "
                              "install the dev extra (pip install -e '.[dev]')") from e
    return torch


@dataclass(frozen=True)
class ZooModel:
    """One zoo architecture: ``make()`` returns the ``torch.nn.Module``."""

    name: str
    title: str
    make: Callable[[], Any]
    size: int        # the published input resolution
    min_size: int    # the smallest input the architecture takes (pools and strides)
    cnn: bool = True
    task: str = "classify"
    """What its output decides, for the agreement with onnxruntime: ``classify`` (the top class),
    ``segment`` (each pixel's class, along axis 1) or ``detect`` (raw head maps: no decision)."""


def _tv(fn: str, **kwargs):
    def make():
        import torchvision.models as tvm
        return getattr(tvm, fn)(weights=None, **kwargs)
    return make


def _segmentation(fn: str, **kwargs):
    def make():
        import torchvision.models.segmentation as seg
        out_only = _module_classes()[0]
        return out_only(getattr(seg, fn)(weights=None, weights_backbone=None, aux_loss=False, **kwargs))
    return make


def _module_classes():
    """The zoo's own modules (defined when torch is there)."""
    torch = _torch()
    nn = torch.nn

    class OutOnly(nn.Module):
        """torchvision's segmentation models return a dict; the export takes its ``out``."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    def conv_bn_relu(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        """A U-Net (Ronneberger et al.) with three levels: max-pool down, transposed convs up,
        skip connections concatenated. Its two upper decoders use 2x2 stride-2 ConvTranspose
        (the paper's up-convolution), the lowest a 4x4 stride-2 pad-1 one (as in pix2pix)."""

        def __init__(self, width=16, classes=2):
            super().__init__()
            w = width
            self.enc = nn.ModuleList([conv_bn_relu(3, w), conv_bn_relu(w, 2 * w), conv_bn_relu(2 * w, 4 * w)])
            self.mid = conv_bn_relu(4 * w, 8 * w)
            self.up = nn.ModuleList([nn.ConvTranspose2d(8 * w, 4 * w, 4, stride=2, padding=1),
                                     nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2),
                                     nn.ConvTranspose2d(2 * w, w, 2, stride=2)])
            self.dec = nn.ModuleList([conv_bn_relu(8 * w, 4 * w), conv_bn_relu(4 * w, 2 * w), conv_bn_relu(2 * w, w)])
            self.head = nn.Conv2d(w, classes, 1)
            self.pool = nn.MaxPool2d(2)

        def forward(self, x):
            skips = []
            for enc in self.enc:
                x = enc(x)
                skips.append(x)
                x = self.pool(x)
            x = self.mid(x)
            for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), skip], dim=1))
            return self.head(x)

    class Conv(nn.Module):
        """YOLOv5's Conv: Conv2d, BatchNorm2d, SiLU."""

        def __init__(self, cin, cout, k=1, s=1, p=None):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2 if p is None else p, bias=False)
            self.bn = nn.BatchNorm2d(cout)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2 = Conv(c, c, 1), Conv(c, c, 3)
            self.add = shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C3(nn.Module):
        """YOLOv5's C3: two 1x1 branches, bottlenecks on one, concatenated, a 1x1 after."""

        def __init__(self, cin, cout, n=1, shortcut=True):
            super().__init__()
            h = cout // 2
            self.cv1, self.cv2, self.cv3 = Conv(cin, h), Conv(cin, h), Conv(2 * h, cout)
            self.m = nn.Sequential(*(Bottleneck(h, shortcut) for _ in range(n)))

        def forward(self, x):
            return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], dim=1))

    class SPPF(nn.Module):
        """YOLOv5's SPPF: three chained 5x5 max pools, concatenated with their input."""

        def __init__(self, cin, cout):
            super().__init__()
            h = cin // 2
            self.cv1, self.cv2 = Conv(cin, h), Conv(4 * h, cout)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat([x, y1, y2, self.m(y2)], dim=1))

    class TinyYolo(nn.Module):
        """A YOLOv5n-like detector (width 0.25, depth 0.33): CSP backbone to stride 32, SPPF,
        a PANet neck (nearest upsample + concat, strided convs down) and three 1x1 detection
        convs of ``3 * (5 + classes)`` channels at strides 8, 16, 32, before the box decoding."""

        def __init__(self, classes=80):
            super().__init__()
            self.b0, self.b1, self.b2 = Conv(3, 16, 6, 2, 2), Conv(16, 32, 3, 2), C3(32, 32)
            self.b3, self.b4 = Conv(32, 64, 3, 2), C3(64, 64, 2)
            self.b5, self.b6 = Conv(64, 128, 3, 2), C3(128, 128, 3)
            self.b7, self.b8, self.b9 = Conv(128, 256, 3, 2), C3(256, 256), SPPF(256, 256)
            self.h10, self.h13 = Conv(256, 128), C3(256, 128, shortcut=False)
            self.h14, self.h17 = Conv(128, 64), C3(128, 64, shortcut=False)
            self.h18, self.h20 = Conv(64, 64, 3, 2), C3(128, 128, shortcut=False)
            self.h21, self.h23 = Conv(128, 128, 3, 2), C3(256, 256, shortcut=False)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            no = 3 * (5 + classes)
            self.detect = nn.ModuleList([nn.Conv2d(64, no, 1), nn.Conv2d(128, no, 1), nn.Conv2d(256, no, 1)])

        def forward(self, x):
            p4 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
            p5 = self.b6(self.b5(p4))
            x = self.b9(self.b8(self.b7(p5)))
            h10 = self.h10(x)
            x = self.h13(torch.cat([self.up(h10), p5], 1))
            h14 = self.h14(x)
            out8 = self.h17(torch.cat([self.up(h14), p4], 1))
            out16 = self.h20(torch.cat([self.h18(out8), h14], 1))
            out32 = self.h23(torch.cat([self.h21(out16), h10], 1))
            return tuple(d(o) for d, o in zip(self.detect, (out8, out16, out32)))

    return OutOnly, UNet, TinyYolo


def _unet():
    return _module_classes()[1]()


def _tiny_yolo():
    return _module_classes()[2]()


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18", "ResNet-18", _tv("resnet18"), 224, 32),
    ZooModel("resnet50", "ResNet-50", _tv("resnet50"), 224, 32),
    ZooModel("mobilenet_v2", "MobileNetV2", _tv("mobilenet_v2"), 224, 32),
    ZooModel("mobilenet_v3_small", "MobileNetV3-small", _tv("mobilenet_v3_small"), 224, 32),
    ZooModel("efficientnet_b0", "EfficientNet-B0", _tv("efficientnet_b0"), 224, 32),
    ZooModel("squeezenet1_1", "SqueezeNet 1.1", _tv("squeezenet1_1"), 224, 64),
    ZooModel("shufflenet_v2_x1_0", "ShuffleNetV2 1.0x", _tv("shufflenet_v2_x1_0"), 224, 32),
    ZooModel("densenet121", "DenseNet-121", _tv("densenet121"), 224, 32),
    ZooModel("googlenet", "GoogLeNet", _tv("googlenet", aux_logits=False, init_weights=True), 224, 32),
    ZooModel("inception_v3", "Inception v3", _tv("inception_v3", aux_logits=False, init_weights=True), 299, 75),
    ZooModel("vgg16", "VGG-16", _tv("vgg16"), 224, 224),  # its 7x7 adaptive pool: 224 or 448
    ZooModel("regnet_x_400mf", "RegNetX-400MF", _tv("regnet_x_400mf"), 224, 32),
    ZooModel("deeplabv3_resnet50", "DeepLabV3 ResNet-50", _segmentation("deeplabv3_resnet50", num_classes=21), 224, 32,
             task="segment"),
    ZooModel("unet", "U-Net (ConvTranspose)", _unet, 224, 16, task="segment"),
    ZooModel("tiny_yolo", "YOLOv5n-style detector", _tiny_yolo, 224, 32, task="detect"),
]}


def zoo_names() -> list[str]:
    return list(ZOO)


def fit_batch_norms(model, size: int, passes: int = FIT_PASSES, batch: int = FIT_BATCH, seed: int = SEED) -> None:
    """Set every batch norm's running mean and variance to the statistics of ``passes`` seeded
    image-like batches (train mode, cumulative averages), then put the model in eval mode."""
    torch = _torch()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the passes
    rng = np.random.default_rng([seed, size])
    model.train()
    with torch.no_grad():
        for _ in range(passes if norms else 0):
            x = np.stack([image_like((3, size, size), rng) for _ in range(batch)]).astype(np.float32)
            model(torch.from_numpy(x))
    model.eval()


def build_zoo(name: str, size: int | None = None, opset: int = OPSET) -> onnx.ModelProto:
    """Model ``name`` of ``ZOO`` for a ``1 x 3 x size x size`` input (default: the published
    size), random weights at a fixed seed, batch norms fitted, exported to ONNX."""
    spec = ZOO.get(name)
    if spec is None:
        raise ModelBuildError(f"unknown zoo model {name!r}; the zoo: {', '.join(ZOO)}")
    size = spec.size if size is None else size
    if size < spec.min_size:
        raise ModelBuildError(f"{name}: input size {size} is below the architecture's smallest, {spec.min_size}")
    torch = _torch()
    torch.manual_seed(SEED)
    model = spec.make()
    fit_batch_norms(model, size)
    buffer = io.BytesIO()
    x = torch.zeros(1, 3, size, size)
    with torch.no_grad(), warnings.catch_warnings():
        # The legacy exporter's deprecation notes: it is the one that writes plain ONNX ops here.
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=opset, input_names=["input"],
                          do_constant_folding=True)
    exported = onnx.load_from_string(buffer.getvalue())
    exported.graph.name = f"{name}_{size}"
    return exported
