"""A real model on real data: a small CNN trained on scikit-learn's 8x8 digits.

The digits ship inside scikit-learn (no download). Training is plain NumPy (im2col convolutions,
softmax cross-entropy, Adam) with fixed seeds, so the same options give the same weights; the
result is exported with ``onnx.helper``. The split is fixed (stratified, 20% held out, seed 0) and
:func:`digits_split` returns it, so a compiled model can be scored on data training never saw.

Network: input ``digits`` (1, 1, 8, 8) holding pixel / 16, Conv 3x3 1->16 pad 1, Relu,
MaxPool 2x2, Conv 3x3 16->32 pad 1, Relu, Flatten, Gemm 512->10 (output ``logits``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view

from systolix.models._graph import DEFAULT_OPSET, GraphBuilder, ModelBuildError

HELDOUT_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass(frozen=True)
class DigitsSplit:
    """Images as float32 (n, 1, 8, 8) holding pixel / 16 (so in [0, 1]) and labels as int64 (n,)."""

    train_x: np.ndarray
    train_y: np.ndarray
    heldout_x: np.ndarray
    heldout_y: np.ndarray


@dataclass(frozen=True)
class DigitsCNN:
    """The trained, exported model with its held-out data and NumPy-measured accuracies."""

    model: onnx.ModelProto
    heldout_x: np.ndarray
    heldout_y: np.ndarray
    train_accuracy: float
    heldout_accuracy: float


NEEDS_ZOO = "the digits model trains on scikit-learn's digits: pip install 'systolix[zoo]' (./dev installs it)"


def digits_split() -> DigitsSplit:
    """scikit-learn's digits, split 80/20 (stratified, seed 0); the same split every call."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:  # scikit-learn is the data source; without it there is no model
        raise ModelBuildError(NEEDS_ZOO) from e
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None, :, :]
    y = data.target.astype(np.int64)
    tx, hx, ty, hy = train_test_split(x, y, test_size=HELDOUT_FRACTION, random_state=SPLIT_SEED, stratify=y)
    return DigitsSplit(tx, ty, hx, hy)


# ---------------------------------------------------------------------------------- NumPy network
def _im2col(x: np.ndarray) -> np.ndarray:
    """NHWC -> (N*H*W, 9*C) patches of a 3x3 window with zero padding 1, ordered (kh, kw, c)."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = sliding_window_view(xp, (3, 3), axis=(1, 2))          # n, h, w, c, 3, 3
    return win.transpose(0, 1, 2, 4, 5, 3).reshape(n * h * w, 9 * c)


def _col2im(cols: np.ndarray, shape) -> np.ndarray:
    n, h, w, c = shape
    cols = cols.reshape(n, h, w, 3, 3, c)
    xp = np.zeros((n, h + 2, w + 2, c))
    for i in range(3):
        for j in range(3):
            xp[:, i:i + h, j:j + w, :] += cols[:, :, :, i, j, :]
    return xp[:, 1:-1, 1:-1, :]


def _forward(p, x_nhwc):
    n = x_nhwc.shape[0]
    c1 = _im2col(x_nhwc)
    z1 = (c1 @ p["w1"] + p["b1"]).reshape(n, 8, 8, -1)
    a1 = np.maximum(z1, 0)
    blocks = a1.reshape(n, 4, 2, 4, 2, a1.shape[-1])
    pooled = blocks.max(axis=(2, 4))
    c2 = _im2col(pooled)
    z2 = (c2 @ p["w2"] + p["b2"]).reshape(n, 4, 4, -1)
    a2 = np.maximum(z2, 0)
    flat = a2.transpose(0, 3, 1, 2).reshape(n, -1)              # ONNX Flatten order: C, H, W
    logits = flat @ p["w3"] + p["b3"]
    return logits, (c1, z1, blocks, pooled, c2, z2, flat)


def _gradients(p, x_nhwc, y):
    n = x_nhwc.shape[0]
    logits, (c1, z1, blocks, pooled, c2, z2, flat) = _forward(p, x_nhwc)
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    loss = -np.log(prob[np.arange(n), y] + 1e-12).mean()
    d = prob
    d[np.arange(n), y] -= 1
    d /= n
    g = {"w3": flat.T @ d, "b3": d.sum(axis=0)}
    da2 = (d @ p["w3"].T).reshape(n, -1, 4, 4).transpose(0, 2, 3, 1)
    dz2 = (da2 * (z2 > 0)).reshape(n * 16, -1)
    g["w2"] = c2.T @ dz2
    g["b2"] = dz2.sum(axis=0)
    dpooled = _col2im(dz2 @ p["w2"].T, pooled.shape)
    mask = blocks == pooled[:, :, None, :, None, :]
    da1 = (mask * dpooled[:, :, None, :, None, :]).reshape(z1.shape)
    dz1 = (da1 * (z1 > 0)).reshape(n * 64, -1)
    g["w1"] = c1.T @ dz1
    g["b1"] = dz1.sum(axis=0)
    return loss, g


def train_digits(epochs: int = 40, batch: int = 32, lr: float = 3e-3, seed: int = 0,
                 channels: tuple[int, int] = (16, 32)) -> tuple[dict[str, np.ndarray], DigitsSplit]:
    """Train the network with Adam; returns float64 weights (NHWC/im2col layout) and the split."""
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the matrices are small (threads only contend) and sums stay reproducible.
    with threadpool_limits(limits=1):
        return _train(epochs, batch, lr, seed, channels)


def _train(epochs, batch, lr, seed, channels):
    split = digits_split()
    rng = np.random.default_rng(seed)
    c1, c2 = channels
    p = {"w1": rng.normal(0, np.sqrt(2 / 9), (9, c1)), "b1": np.zeros(c1),
         "w2": rng.normal(0, np.sqrt(2 / (9 * c1)), (9 * c1, c2)), "b2": np.zeros(c2),
         "w3": rng.normal(0, np.sqrt(1 / (16 * c2)), (16 * c2, 10)), "b3": np.zeros(10)}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    x = split.train_x.transpose(0, 2, 3, 1).astype(np.float64)
    y = split.train_y
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            idx = order[start:start + batch]
            _, g = _gradients(p, x[idx], y[idx])
            step += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                p[k] -= lr * (m[k] / (1 - 0.9 ** step)) / (np.sqrt(v[k] / (1 - 0.999 ** step)) + 1e-8)
    return p, split


def _accuracy(p, x_nchw, y) -> float:
    logits, _ = _forward(p, x_nchw.transpose(0, 2, 3, 1).astype(np.float64))
    return float((logits.argmax(axis=1) == y).mean())


def export_digits(p: dict[str, np.ndarray], opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The trained weights as an ONNX model (input ``digits`` 1x1x8x8, output ``logits``)."""
    b = GraphBuilder("digits_cnn", opset, 0)
    x = b.input("digits", [1, 1, 8, 8])

    def conv(x, w_cols, bias, name):
        cout = w_cols.shape[1]
        cin = w_cols.shape[0] // 9
        w = w_cols.reshape(3, 3, cin, cout).transpose(3, 2, 0, 1)     # (kh, kw, c, o) -> (o, c, kh, kw)
        y = b.node("Conv", [x, b.const(f"{name}_W", w), b.const(f"{name}_B", bias)], name=name,
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        b.channels[y] = cout
        return y

    x = b.relu(conv(x, p["w1"], p["b1"], "conv1"))
    x = b.maxpool(x, 2, name="pool1")
    x = b.relu(conv(x, p["w2"], p["b2"], "conv2"))
    x = b.flatten(x)
    y = b.node("Gemm", [x, b.const("dense_W", p["w3"]), b.const("dense_B", p["b3"])], name="dense")
    b.output(y, "logits")
    return b.model(doc="CNN trained on scikit-learn's digits (pixel / 16 in, 10 logits out)", kind="classifier",
                   dataset="sklearn.datasets.load_digits", heldout_fraction=HELDOUT_FRACTION, split_seed=SPLIT_SEED)


def _cache_dir() -> Path:
    from systolix.models import cache_dir

    return cache_dir()


def build_digits_cnn(opset: int = DEFAULT_OPSET, epochs: int = 40, seed: int = 0, cache: bool = True) -> DigitsCNN:
    """Train (or load from the user cache) the digits CNN; returns the ONNX model and the held-out
    split. The cache key hashes this module's source and the options, so a change retrains."""
    try:
        import sklearn
    except ImportError as e:
        raise ModelBuildError(NEEDS_ZOO) from e
    key_src = inspect.getsource(inspect.getmodule(build_digits_cnn)) + repr((epochs, seed, sklearn.__version__))
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    path = _cache_dir() / f"digits_cnn-{key}.npz"
    params = None
    if cache and path.is_file():
        try:
            with np.load(path) as f:
                params = {k: f[k] for k in f.files}
        except (OSError, ValueError):
            params = None  # a damaged cache file is retrained and rewritten
    if params is None:
        params, _ = train_digits(epochs=epochs, seed=seed)
        if cache:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
                np.savez(tmp, **params)
                os.replace(tmp, path)
            except OSError:
                pass  # a read-only home only costs a retraining next time
    split = digits_split()
    return DigitsCNN(export_digits(params, opset), split.heldout_x, split.heldout_y,
                     _accuracy(params, split.train_x, split.train_y),
                     _accuracy(params, split.heldout_x, split.heldout_y))
