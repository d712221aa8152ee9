"""Small models written as a new user would: plain torch.nn code, random weights, batch norms
fitted to random normal inputs, exported with torch's ONNX exporter (TorchScript, which folds
each batch norm into the conv before it unless ``keep_batch_norms``).

The tuning set of the sample-free ranges (``systolix.hir_passes.estimate_ranges``) together with
the project's own builders; the models no tuning loop sees are elsewhere (issue 20).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx

NAMES = ("torch_cnn", "torch_cnn_bn", "torch_resnet", "torch_mobile")


def _block(torch, cin: int, cout: int, stride: int = 1, groups: int = 1, act=None):
    nn = torch.nn
    return [nn.Conv2d(cin, cout, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(cout), act or nn.ReLU()]


def _modules(torch, name: str):
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.body = nn.Sequential(*_block(torch, c, c), nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    class Inverted(nn.Module):
        def __init__(self, c: int, expand: int = 4):
            super().__init__()
            e = c * expand
            self.body = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
                                      *_block(torch, e, e, groups=e, act=nn.ReLU6()),
                                      nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return x + self.body(x)

    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    if name in ("torch_cnn", "torch_cnn_bn"):
        layers = [*_block(torch, 3, 32), *_block(torch, 32, 64, 2), *_block(torch, 64, 128, 2), *_block(torch, 128, 128),
                  *head, nn.Linear(128, 10)]
        return nn.Sequential(*layers), (1, 3, 32, 32)
    if name == "torch_resnet":
        layers = [*_block(torch, 3, 32), Residual(32), *_block(torch, 32, 64, 2), Residual(64), Residual(64),
                  *head, nn.Linear(64, 10)]
        return nn.Sequential(*layers), (1, 3, 32, 32)
    if name == "torch_mobile":
        layers = [*_block(torch, 3, 16, 2, act=nn.ReLU6()), Inverted(16), nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32),
                  nn.ReLU6(), Inverted(32), Inverted(32), *head, nn.Linear(32, 10)]
        return nn.Sequential(*layers), (1, 3, 48, 48)
    raise ValueError(f"no torch model {name!r}; there are {', '.join(NAMES)}")


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """``name``'s ONNX model: random weights (seed), batch norms fitted to 256 random normal inputs."""
    import torch

    torch.manual_seed(seed)
    module, shape = _modules(torch, name)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None  # a plain average over the fitting batches
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    module.train()
    with torch.no_grad():
        for _ in range(4):
            module(torch.randn(64, *shape[1:]))
    module.eval()
    f = io.BytesIO()
    mode = torch.onnx.TrainingMode.PRESERVE if name.endswith("_bn") else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, torch.randn(*shape), f, dynamo=False, opset_version=13, training=mode,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(f.getvalue())


def normal_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Random normal inputs, as the batch norms were fitted to."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds
