"""What every builder does last: calibrate on example inputs, then hand back a checked model."""

from __future__ import annotations

import onnx

from systolix.models._graph import GraphBuilder
from systolix.models.calibration import calibrate_batchnorms, calibrate_classifier_head
from systolix.models.inputs import example_input_set

# Calibration inputs use their own seed so that example_inputs(model, seed=0..) are unseen data.
CALIBRATION_SEED = 7919
HEAD_SAMPLES = 16


def finish(b: GraphBuilder, doc: str, kind: str = "tensor", head: str | None = None,
           calibrate: bool = True, calibration_count: int = 16, target_std: float = 2.0,
           **metadata) -> onnx.ModelProto:
    """Build ``b``'s model; with ``calibrate``, set BN statistics and (for a classifier whose last
    Gemm is named ``head``) the head's scale from ``calibration_count`` image-like inputs."""
    model = b.model(doc=doc, kind=kind, **metadata)
    if calibrate:
        samples = example_input_set(model, calibration_count, seed=CALIBRATION_SEED)
        calibrate_batchnorms(model, samples)
        if head is not None:
            # the head needs enough inputs to spread its class prototypes over
            if len(samples) < HEAD_SAMPLES:
                samples = example_input_set(model, HEAD_SAMPLES, seed=CALIBRATION_SEED)
            calibrate_classifier_head(model, head, samples, target_std=target_std)
    return model
