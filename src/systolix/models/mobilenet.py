"""A MobileNetV2-style stack: inverted residual blocks (1x1 expansion, 3x3 depthwise at stride 1
or 2, ReLU6 written as Clip, linear 1x1 bottleneck, residual Add when shapes match), as in
``keras.applications.MobileNetV2`` (stride-2 depthwise convs pad bottom/right only, like its
``correct_pad``), ending in a 1x1 conv, global average pool and a dense classifier.
"""

from __future__ import annotations

import onnx

from systolix.models._common import finish
from systolix.models._graph import DEFAULT_OPSET, GraphBuilder, ModelBuildError

# (expansion t, output channels c, repeats n, first stride s): MobileNetV2's first three rows, the
# third cut from 3 to 2 repeats. Random BN networks amplify small errors with depth, and five
# blocks keep FP16BP8 rounding well below the spread of the logits while covering every feature.
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2)]


def mobilenetv2_block(opset: int = DEFAULT_OPSET, seed: int = 2, input_size: int = 96, num_classes: int = 10,
                      unit_scale: bool = True) -> onnx.ModelProto:
    """MobileNetV2's stem and 5 inverted-residual blocks at ``input_size`` (a multiple of 16), 10 classes."""
    if input_size % 16:
        raise ModelBuildError(f"mobilenetv2_block: input_size must be a multiple of 16, not {input_size}")
    b = GraphBuilder("mobilenetv2_block", opset, seed)
    x = b.input("input", [1, 3, input_size, input_size], layout="NCHW")
    x = b.conv(x, 32, 3, 2, pads=[0, 0, 1, 1], bias=False, name="Conv1")
    x = b.clip(b.bn(x, name="bn_Conv1"), 0.0, 6.0, name="Conv1_relu")
    index = 0
    for t, c, n, s in BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"block_{index}"
            cin = b.ch(x)
            y = x
            if t != 1:
                y = b.conv(y, cin * t, 1, bias=False, name=f"{name}_expand")
                y = b.clip(b.bn(y, name=f"{name}_expand_BN"), 0.0, 6.0, name=f"{name}_expand_relu")
            pads = [0, 0, 1, 1] if stride == 2 else [1, 1, 1, 1]
            y = b.conv(y, b.ch(y), 3, stride, pads=pads, group=b.ch(y), bias=False, name=f"{name}_depthwise")
            y = b.clip(b.bn(y, name=f"{name}_depthwise_BN"), 0.0, 6.0, name=f"{name}_depthwise_relu")
            y = b.conv(y, c, 1, bias=False, gain=1.0, name=f"{name}_project")
            y = b.bn(y, name=f"{name}_project_BN")
            x = b.add(x, y, name=f"{name}_add") if stride == 1 and cin == c else y
            index += 1
    x = b.conv(x, 128, 1, bias=False, name="Conv_1")
    x = b.clip(b.bn(x, name="Conv_1_bn"), 0.0, 6.0, name="out_relu")
    x = b.flatten(b.gap(x, name="global_average_pooling2d"), name="flatten")
    b.channels[x] = 128
    logits = b.gemm(x, num_classes, gain=1.0, name="predictions")
    b.output(logits, "logits")
    return finish(b, "MobileNetV2-style stack (inverted residuals, depthwise 3x3, ReLU6), random weights "
                  "calibrated on image-like inputs", kind="classifier", head="predictions", unit_scale=unit_scale)
