"""InstanceNormalization: each channel normalised by its own mean and variance over the map.

Those statistics are computed at run time from the input, and the accelerator has no square root
or division by a computed value, so the node runs on the host. The frontend folds the cases whose
statistics are known when compiling: a constant input (as any constant subgraph), and a map of one
pixel, whose variance is 0 and whose output is the bias ``B`` (``onnx_frontend.fold_constants``).
"""

from __future__ import annotations

from systolix.lowering.registry import OpHandler, handles

REASON = ("it normalises each channel by the mean and variance of its own map, computed at run time (the accelerator has "
          "no square root or division by a computed value); it folds to a constant only when its input is a constant or "
          "its map is one pixel")


@handles("InstanceNormalization")
class InstanceNormalization(OpHandler):
    def check(self, node, lw):
        return REASON

    def lower(self, node, lw):  # pragma: no cover - check refuses every node
        raise NotImplementedError
