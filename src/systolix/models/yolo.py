"""YOLOv4-tiny (Darknet ``yolov4-tiny.cfg``, as the Keras ports name its layers) up to its two head
convolutions: ``conv2d_17`` (6x6 for a 192x192 input) and ``conv2d_20`` (12x12), each with
3 x (5 + classes) channels, linear, with bias. Everything before them is conv-BN-LeakyReLU(0.1),
with CSP "route" blocks (a channel Split keeping the second half, Concats), 2x2 max pools and one
nearest 2x upsampling (Resize). Downsampling convs pad only top and left, as the Keras port's
``ZeroPadding2D(((1, 0), (1, 0)))`` + ``valid`` does.
"""

from __future__ import annotations

import onnx

from systolix.models._common import finish
from systolix.models._graph import DEFAULT_OPSET, GraphBuilder, ModelBuildError


def yolov4_tiny(opset: int = DEFAULT_OPSET, seed: int = 4, input_size: int = 192, num_classes: int = 80,
                unit_scale: bool = True) -> onnx.ModelProto:
    """YOLOv4-tiny backbone and neck at ``input_size`` (a multiple of 32); outputs
    ``model/conv2d_17/BiasAdd:0`` and ``model/conv2d_20/BiasAdd:0`` as tf2onnx names them."""
    if input_size % 32:
        raise ModelBuildError(f"yolov4_tiny: input_size must be a multiple of 32, not {input_size}")
    b = GraphBuilder("yolov4_tiny", opset, seed)
    x = b.input("input_1", [1, 3, input_size, input_size], layout="NCHW")
    counter = iter(range(100))

    def conv(x, filters, kernel=3, downsample=False, bn=True, activate=True):
        i = next(counter)
        name = "conv2d" if i == 0 else f"conv2d_{i}"
        if downsample:
            pads = [1, 1, 0, 0]
            stride = 2
        else:
            pads = [(kernel - 1) // 2] * 4
            stride = 1
        y = b.conv(x, filters, kernel, stride, pads=pads, bias=not bn, name=name, gain=2.0 if activate else 1.0)
        if bn:
            y = b.bn(y, name=f"batch_normalization_{i}")
        if activate:
            y = b.leaky_relu(y, 0.1, name=f"leaky_re_lu_{i}")
        return y

    def route_group(x):
        # tf.split(x, 2, axis=-1)[1]: a two-way Split whose first half is left unused
        c = b.ch(x)
        return b.split(x, [c // 2, c // 2], name="split")[1]

    def csp_block(x, filters):
        x = conv(x, filters)
        route = x
        x = route_group(x)
        x = conv(x, filters // 2)
        route_1 = x
        x = conv(x, filters // 2)
        x = b.concat([x, route_1])
        x = conv(x, filters, 1)
        route_tail = x
        x = b.concat([route, x])
        return b.maxpool(x, 2, 2), route_tail

    x = conv(x, 32, downsample=True)
    x = conv(x, 64, downsample=True)
    x, _ = csp_block(x, 64)
    x, _ = csp_block(x, 128)
    x, route_1 = csp_block(x, 256)
    x = conv(x, 512)
    x = conv(x, 256, 1)
    conv_lobj = conv(x, 512)
    head_channels = 3 * (num_classes + 5)
    conv_lbbox = conv(conv_lobj, head_channels, 1, bn=False, activate=False)  # conv2d_17
    x = conv(x, 128, 1)
    x = b.resize(x, scales=[1.0, 1.0, 2.0, 2.0], mode="nearest",
                 nearest_mode="floor" if opset >= 11 else None, name="up_sampling2d")
    x = b.concat([x, route_1])
    conv_mobj = conv(x, 256)
    conv_mbbox = conv(conv_mobj, head_channels, 1, bn=False, activate=False)  # conv2d_20
    b.output(conv_lbbox, "model/conv2d_17/BiasAdd:0")
    b.output(conv_mbbox, "model/conv2d_20/BiasAdd:0")
    return finish(b, f"YOLOv4-tiny at {input_size}x{input_size} up to its two head convolutions, random weights "
                  "calibrated on image-like inputs", kind="detector", unit_scale=unit_scale)
