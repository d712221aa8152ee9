"""Models the project does not tune: plain ``torch.nn`` modules exported by torch's ONNX exporter.

These are built the way a new user builds a model, not by this project's builders
(:mod:`systolix.models`' He-initialised, unit-scaled graphs): torch's default initialisation,
a fixed seed, batch norms fitted to random normal inputs (forward passes in train mode with a
cumulative average, then eval mode), exported with ``torch.onnx.export(..., dynamo=False)``.
Their depths, widths and input shapes differ from the test models (ResNet-20/50 v2, YOLOv4-tiny,
the MobileNetV2 stack, the MLP, the digits CNN) and from torchvision's.

**No tuning loop may use them.** They exist so that accuracy figures are measured on models no
margin, gain rule or threshold of the compiler was chosen on (issue 20, part 5): a compiler change
must be designed and tuned on the test models, then measured here
(``benchmarks/bench_accuracy.py``). They are kept out of ``systolix.models.MODELS`` so that
nothing iterating over the zoo picks them up by accident.

``build_untuned(name)`` returns an ``onnx.ModelProto`` (needs torch: ``pip install
'systolix[dev]'``); ``UNTUNED`` maps each name to its description.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import onnx

from systolix.errors import SystolixError

__all__ = ["UNTUNED", "UntunedModel", "build_untuned", "untuned_names"]

OPSET = 13
# Random normal batches the batch norms' statistics are fitted on (cumulative average).
FIT_BATCHES = 4
FIT_BATCH_SIZE = 8


class TorchMissingError(SystolixError):
    """torch is needed to build the untuned models and is not installed."""


@dataclass(frozen=True)
class UntunedModel:
    name: str
    description: str
    input_shape: tuple[int, ...]          # with the batch of 1
    classifier: bool                      # its output is class scores
    module: Callable[..., object]         # (torch.nn) -> torch.nn.Module
    opset: int = OPSET                    # LayerNormalization needs 17


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TorchMissingError("the untuned models are built with torch, which is not installed "
                                "(pip install 'systolix[dev]')") from e
    return torch


def _conv_bn(nn, cin: int, cout: int, kernel=3, stride=1, padding=None, groups: int = 1, act=None):
    if padding is None:
        padding = tuple(k // 2 for k in kernel) if isinstance(kernel, tuple) else kernel // 2
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), act if act is not None else nn.ReLU())


def _vgg(nn):
    """VGG-style plain CNN: 3x40x40, widths 24-24 / 40-40 / 72-72-72, max pools, two dense layers."""
    layers, cin = [], 3
    for stage in ((24, 24), (40, 40), (72, 72, 72)):
        for width in stage:
            layers.append(_conv_bn(nn, cin, width))
            cin = width
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(72 * 5 * 5, 88), nn.ReLU(), nn.Linear(88, 7))


def _wide_resnet(nn):
    """Wide, shallow post-activation ResNet: 3x24x24, stem 48, three basic blocks of 112 / 112 / 160."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.a = _conv_bn(nn, cin, cout, stride=stride)
            self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.b(self.a(x)) + self.skip(x))

    return nn.Sequential(_conv_bn(nn, 3, 48), Block(48, 112, 1), Block(112, 112, 2), Block(112, 160, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(160, 12))


def _separable(nn):
    """Depthwise-separable net (MobileNet v1-like, ReLU6) on a non-square 3x56x40 input, 6 classes."""
    layers = [_conv_bn(nn, 3, 20, stride=2, act=nn.ReLU6())]
    cin = 20
    for cout, stride in ((36, 1), (52, 2), (52, 1), (100, 2), (100, 1), (140, 2)):
        layers += [_conv_bn(nn, cin, cin, stride=stride, groups=cin, act=nn.ReLU6()),
                   _conv_bn(nn, cin, cout, kernel=1, act=nn.ReLU6())]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 6))


def _unet(nn):
    """Small UNet-like encoder-decoder regression net: 2x32x32 in, 3x32x32 out, LeakyReLU,
    transposed-convolution upsampling and skip concatenations."""

    def act():
        return nn.LeakyReLU(0.1)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1 = nn.Sequential(_conv_bn(nn, 2, 14, act=act()), _conv_bn(nn, 14, 14, act=act()))
            self.enc2 = nn.Sequential(_conv_bn(nn, 14, 30, act=act()), _conv_bn(nn, 30, 30, act=act()))
            self.mid = nn.Sequential(_conv_bn(nn, 30, 60, act=act()), _conv_bn(nn, 60, 60, act=act()))
            self.pool = nn.MaxPool2d(2)
            self.up2 = nn.ConvTranspose2d(60, 30, 2, stride=2)
            self.dec2 = _conv_bn(nn, 60, 30, act=act())
            self.up1 = nn.ConvTranspose2d(30, 14, 2, stride=2)
            self.dec1 = _conv_bn(nn, 28, 14, act=act())
            self.head = nn.Conv2d(14, 3, 1)

        def forward(self, x):
            import torch
            e1 = self.enc1(x)
            e2 = self.enc2(self.pool(e1))
            m = self.mid(self.pool(e2))
            d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
            d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
            return self.head(d1)

    return UNet()


def _audio(nn):
    """Audio-like conv net on a 1x40x98 spectrogram: wide-in-time kernels, strides along time
    only, LeakyReLU, average pools, 11 classes."""
    act = nn.LeakyReLU(0.02)
    return nn.Sequential(
        _conv_bn(nn, 1, 28, kernel=(3, 9), stride=(1, 2), act=act),
        _conv_bn(nn, 28, 28, kernel=(3, 5), act=nn.LeakyReLU(0.02)), nn.MaxPool2d((2, 2)),
        _conv_bn(nn, 28, 44, kernel=(3, 5), stride=(1, 2), act=nn.LeakyReLU(0.02)),
        _conv_bn(nn, 44, 44, kernel=3, act=nn.LeakyReLU(0.02)), nn.AvgPool2d((2, 2)),
        _conv_bn(nn, 44, 80, kernel=3, act=nn.LeakyReLU(0.02)),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(80, 11))


def _mlp(nn):
    """MLP of odd widths with batch norms: 53 -> 117 -> 83 -> 41 -> 9."""
    layers, cin = [], 53
    for width in (117, 83, 41):
        layers += [nn.Linear(cin, width), nn.BatchNorm1d(width), nn.ReLU()]
        cin = width
    return nn.Sequential(*layers, nn.Linear(cin, 9))


def _dense(nn):
    """DenseNet-like concat net: 3x36x36, stem 16, two dense blocks of 4 layers (growth 12),
    a 1x1 transition with an average pool, 10 classes."""

    class DenseBlock(nn.Module):
        def __init__(self, cin, growth, count):
            super().__init__()
            self.layers = nn.ModuleList(_conv_bn(nn, cin + k * growth, growth) for k in range(count))

        def forward(self, x):
            import torch
            for layer in self.layers:
                x = torch.cat([x, layer(x)], 1)
            return x

    return nn.Sequential(_conv_bn(nn, 3, 16, stride=2), DenseBlock(16, 12, 4),
                         _conv_bn(nn, 64, 32, kernel=1), nn.AvgPool2d(2), DenseBlock(32, 12, 4),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(80, 10))


def _encoder(nn):
    """torch's own nn.TransformerEncoder (2 layers of nn.TransformerEncoderLayer: d_model 64, 4
    heads, feed-forward 128, GeLU, batch_first) on 32 tokens of 64, the mean over tokens, a
    linear head of 10 classes: the attention as torch's exporter writes nn.MultiheadAttention
    (packed in_proj, sequence-first inside, per-head scaling of Q and K by Mul)."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, activation="gelu",
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            import torch

            # Without gradients torch would run its fused kernel, which the exporter cannot write.
            before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                return self.head(self.encoder(x).mean(1))
            finally:
                torch.backends.mha.set_fastpath_enabled(before)

    return Encoder()


UNTUNED: dict[str, UntunedModel] = {m.name: m for m in [
    UntunedModel("untuned/vgg", "VGG-style plain CNN, 3x40x40, 7 conv + 2 dense, 7 classes", (1, 3, 40, 40), True,
                 _vgg),
    UntunedModel("untuned/wide_resnet", "wide shallow ResNet (post-activation), 3x24x24, widths 48-160, 12 classes",
                 (1, 3, 24, 24), True, _wide_resnet),
    UntunedModel("untuned/separable", "depthwise-separable net, ReLU6, 3x56x40, 6 classes", (1, 3, 56, 40), True,
                 _separable),
    UntunedModel("untuned/unet", "UNet-like encoder-decoder regression, 2x32x32 -> 3x32x32, LeakyReLU, "
                 "ConvTranspose, Concat", (1, 2, 32, 32), False, _unet),
    UntunedModel("untuned/audio", "audio-like conv net on a 1x40x98 spectrogram, LeakyReLU, 11 classes",
                 (1, 1, 40, 98), True, _audio),
    UntunedModel("untuned/mlp", "MLP with batch norms, 53 -> 117 -> 83 -> 41 -> 9", (1, 53), True, _mlp),
    UntunedModel("untuned/dense", "DenseNet-like concat net, 3x36x36, growth 12, 10 classes", (1, 3, 36, 36), True,
                 _dense),
    UntunedModel("untuned/torch_encoder", "torch's nn.TransformerEncoder, 2 layers, 32 tokens of 64, 4 heads, "
                 "GeLU, mean over tokens, 10 classes (opset 17)", (1, 32, 64), True, _encoder, opset=17),
]}


def untuned_names() -> list[str]:
    return list(UNTUNED)


def build_untuned(name: str, seed: int = 0) -> onnx.ModelProto:
    """Model ``name`` (see ``UNTUNED``): torch's default initialisation under ``seed``, batch norms
    fitted to random normal inputs, exported at opset 13 (its ``opset``) with a batch of 1."""
    spec = UNTUNED.get(name)
    if spec is None:
        raise SystolixError(f"unknown untuned model {name!r}; one of {', '.join(UNTUNED)}")
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(seed)
    module = spec.module(nn)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = None  # a cumulative average over the fitting batches
    generator = torch.Generator().manual_seed(seed + 1)
    module.train()
    with torch.no_grad():
        for _ in range(FIT_BATCHES):
            module(torch.randn((FIT_BATCH_SIZE, *spec.input_shape[1:]), generator=generator))
    module.eval()
    example = torch.randn(spec.input_shape, generator=generator)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        # torch's note that the TorchScript exporter is the legacy one: chosen on purpose (it is
        # what most published ONNX files came from, and it needs no onnxscript)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # nn.MultiheadAttention's shape checks
        torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=spec.opset,
                          input_names=["input"], output_names=["output"], do_constant_folding=True)
    model = onnx.load_from_string(buffer.getvalue())
    model.doc_string = f"{spec.description} (torch.nn, default init, seed {seed}; untuned: never tune on it)"
    return model
