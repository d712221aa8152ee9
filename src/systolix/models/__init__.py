"""Test and benchmark models, built from code with random (unit-scaled) or trained weights.

``build(name, **options)`` returns an ``onnx.ModelProto``; ``MODELS`` maps each name to its
:class:`ModelSpec` (builder, one-line description, family, opsets). Every builder is
deterministic: the same name and options give the same bytes. ``example_inputs(model, seed)``
gives inputs of the model's own shapes (image-like for images).

Families:
  * ``benchmark``: ``resnet20v2``, ``resnet50v2``, ``yolov4_tiny`` (the three models of Tensil's published benchmarks);
  * ``network``: ``mobilenetv2_block``, ``mlp``, ``digits_cnn`` (trained on scikit-learn's digits);
  * ``classic``: ``squeezenet10_zoo``, ``inception_v1_zoo``, ``vgg19_classifier``, as the ONNX model zoo's
    early files (opsets 7 to 9) spell them (:mod:`systolix.models.classic_zoo`);
  * ``ops`` / ``host`` / ``cnn``: the op catalogue of :mod:`systolix.models.ops`;
  * ``transformer``: ``vit_tiny``, ``bert_tiny`` (:mod:`systolix.models.transformers`);
  * ``bad``: valid ONNX the compiler must refuse (weights that are model inputs).
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from systolix.models._graph import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, ModelBuildError
from systolix.models import classic_zoo
from systolix.models.digits import DigitsCNN, build_digits_cnn, digits_split
from systolix.models.inputs import example_input_set, example_inputs
from systolix.models.mlp import mlp
from systolix.models.mobilenet import mobilenetv2_block
from systolix.models.ops import CASES, build_case
from systolix.models.resnet import resnet20v2, resnet50v2
from systolix.models.stats import ModelStats, model_stats
from systolix.models.transformers import bert_tiny, vit_tiny
from systolix.models.yolo import yolov4_tiny

__all__ = [
    "MODELS", "DigitsCNN", "ModelBuildError", "ModelSpec", "ModelStats", "build", "build_cached", "build_digits_cnn",
    "digits_split", "example_input_set", "example_inputs", "model_stats", "names", "save",
]


@dataclass(frozen=True)
class ModelSpec:
    """A buildable model: ``builder(**options)`` returns its ``onnx.ModelProto``."""

    name: str
    builder: Callable[..., onnx.ModelProto]
    description: str
    family: str
    large: bool = False          # takes seconds to build and long to compile: tests mark it slow
    default_opset: int = DEFAULT_OPSET
    min_opset: int = MIN_OPSET
    max_opset: int = MAX_OPSET


def _digits(opset: int = DEFAULT_OPSET, epochs: int = 40, seed: int = 0, cache: bool = True) -> onnx.ModelProto:
    return build_digits_cnn(opset=opset, epochs=epochs, seed=seed, cache=cache).model


def _case_builder(name: str) -> Callable[..., onnx.ModelProto]:
    def builder(opset: int | None = None, seed: int | None = None, unit_scale: bool = True) -> onnx.ModelProto:
        return build_case(name, opset=opset, seed=seed, unit_scale=unit_scale)
    builder.__doc__ = CASES[name].description
    return builder


MODELS: dict[str, ModelSpec] = {
    "resnet20v2": ModelSpec("resnet20v2", resnet20v2, "ResNet-20 v2, CIFAR-10 32x32x3, 10 classes (Keras example)",
                            "benchmark"),
    "resnet50v2": ModelSpec("resnet50v2", resnet50v2, "ResNet-50 v2, ImageNet 224x224x3, 1000 classes "
                            "(keras.applications)", "benchmark", large=True),
    "yolov4_tiny": ModelSpec("yolov4_tiny", yolov4_tiny, "YOLOv4-tiny 192x192 up to heads conv2d_17 and conv2d_20",
                             "benchmark", large=True),
    "mobilenetv2_block": ModelSpec("mobilenetv2_block", mobilenetv2_block, "MobileNetV2-style stack, 96x96x3, "
                                   "depthwise 3x3, ReLU6, residual Add, 10 classes", "network"),
    "mlp": ModelSpec("mlp", mlp, "MLP 37 -> 61 -> 29 -> 10 (Gemm + Relu)", "network"),
    "digits_cnn": ModelSpec("digits_cnn", _digits, "CNN trained on scikit-learn digits (8x8), 10 classes",
                            "network"),
    "squeezenet10_zoo": ModelSpec("squeezenet10_zoo", classic_zoo.squeezenet10_zoo, "SqueezeNet 1.0 as the ONNX zoo's "
                                  "opset 7-9 files (Dropout mask, ceil-mode pools, Softmax), 224x224x3", "classic",
                                  large=True, default_opset=classic_zoo.DEFAULT_OPSET, min_opset=classic_zoo.MIN_OPSET,
                                  max_opset=classic_zoo.MAX_OPSET),
    "inception_v1_zoo": ModelSpec("inception_v1_zoo", classic_zoo.inception_v1_zoo, "Inception v1 (GoogLeNet) as the "
                                  "ONNX zoo's opset 7-9 files (LRN, Dropout mask, Reshape by initializer), 224x224x3",
                                  "classic", large=True, default_opset=classic_zoo.DEFAULT_OPSET,
                                  min_opset=classic_zoo.MIN_OPSET, max_opset=classic_zoo.MAX_OPSET),
    "vgg19_classifier": ModelSpec("vgg19_classifier", classic_zoo.vgg19_classifier, "VGG-19's classifier from "
                                  "[1, 512, 7, 7] (fc6 25088 -> 4096 exceeds ultra96v2's DRAM1)", "classic", large=True,
                                  default_opset=classic_zoo.DEFAULT_OPSET, min_opset=classic_zoo.MIN_OPSET,
                                  max_opset=classic_zoo.MAX_OPSET),
    "vit_tiny": ModelSpec("vit_tiny", vit_tiny, "ViT-tiny, 32x32x3, patch 4, dim 64, 4 heads, 2 blocks, 10 classes",
                          "transformer", default_opset=17, min_opset=17, max_opset=17),
    "bert_tiny": ModelSpec("bert_tiny", bert_tiny, "BERT-tiny encoder, 32 tokens of dim 64, 4 heads, 2 blocks, "
                           "pooler, 10 classes", "transformer", default_opset=17, min_opset=17, max_opset=17),
}
for _name, _case in CASES.items():
    MODELS[_name] = ModelSpec(_name, _case_builder(_name), _case.description, _name.split("/")[0],
                              default_opset=_case.default_opset, min_opset=_case.min_opset,
                              max_opset=_case.max_opset)


def names(family: str | None = None, large: bool | None = None) -> list[str]:
    """Model names, optionally only one family (``benchmark``, ``network``, ``ops``, ``host``, ``cnn``, ``bad``)
    and/or only large (or only small) ones."""
    return [n for n, s in MODELS.items()
            if (family is None or s.family == family) and (large is None or s.large == large)]


def build(name: str, **options) -> onnx.ModelProto:
    """Build model ``name`` (see ``MODELS``); ``options`` go to its builder (``opset``, ``seed``...)."""
    spec = MODELS.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, MODELS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see systolix.models.MODELS"
        raise ModelBuildError(f"unknown model {name!r}{hint}")
    accepted = inspect.signature(spec.builder).parameters
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ModelBuildError(f"{name}: unknown option(s) {', '.join(unknown)}; accepted: {', '.join(accepted)}")
    opset = options.get("opset")
    if opset is not None and not spec.min_opset <= opset <= spec.max_opset:
        raise ModelBuildError(f"{name}: exists at opsets {spec.min_opset}..{spec.max_opset}, not {opset}")
    return spec.builder(**options)


def cache_dir() -> Path:
    """Where built models and the trained digits weights are cached: ``$SYSTOLIX_CACHE``, else
    ``$XDG_CACHE_HOME/systolix``, else ``~/.cache/systolix``."""
    if os.environ.get("SYSTOLIX_CACHE"):
        return Path(os.environ["SYSTOLIX_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "systolix"


def build_cached(name: str, **options) -> onnx.ModelProto:
    """``build(name, **options)``, kept on disk for next time (ResNet-50 v2 takes ~10 s to build).

    Builds are deterministic, so the cache key is a hash of this package's source and the
    onnx/onnxruntime versions (a folder; older folders are deleted) plus the name and options."""
    import hashlib
    import shutil

    import onnxruntime

    code = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        code.update(source.read_bytes())
    code.update(repr((onnx.__version__, onnxruntime.__version__)).encode())
    root = cache_dir() / "models"
    folder = root / code.hexdigest()[:16]
    key = hashlib.sha256(repr((name, sorted(options.items()))).encode()).hexdigest()[:16]
    path = folder / f"{name.replace('/', '__')}-{key}.onnx"
    if path.is_file():
        try:
            return onnx.load(str(path))
        except Exception:  # noqa: BLE001 - a damaged cache file is rebuilt and rewritten
            pass
    model = build(name, **options)
    try:
        # models built by older code are never read again: drop them (ResNet-50 is 100 MB)
        for stale in root.glob("*"):
            if stale.is_dir() and stale != folder:
                shutil.rmtree(stale, ignore_errors=True)
        save(model, path)
    except OSError:
        pass  # a read-only home only costs a rebuild next time
    return model


def save(model: onnx.ModelProto, path: str | Path) -> Path:
    """Write ``model`` to ``path`` whole or not at all."""
    from systolix.artifacts import write_bytes_atomic

    path = Path(path)
    write_bytes_atomic(path, model.SerializeToString())
    return path
