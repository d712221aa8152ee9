"""What every builder does last: bring the model to unit scale on example inputs, then hand back a checked model."""

from __future__ import annotations

import onnx

from systolix.models._graph import GraphBuilder
from systolix.models.unit_scale import fit_batchnorms, fit_classifier_head
from systolix.models.inputs import example_input_set

# The scaling inputs use their own seed so that example_inputs(model, seed=0..) are unseen data.
SCALING_SEED = 7919
HEAD_SAMPLES = 16


def finish(b: GraphBuilder, doc: str, kind: str = "tensor", head: str | None = None,
           unit_scale: bool = True, scaling_samples: int = 16, target_std: float = 2.0,
           **metadata) -> onnx.ModelProto:
    """Build ``b``'s model; with ``unit_scale``, set BN statistics and (for a classifier whose last
    Gemm is named ``head``) the head's scale from ``scaling_samples`` image-like inputs."""
    model = b.model(doc=doc, kind=kind, **metadata)
    if unit_scale:
        samples = example_input_set(model, scaling_samples, seed=SCALING_SEED)
        fit_batchnorms(model, samples)
        if head is not None:
            # the head needs enough inputs to spread its class prototypes over
            if len(samples) < HEAD_SAMPLES:
                samples = example_input_set(model, HEAD_SAMPLES, seed=SCALING_SEED)
            fit_classifier_head(model, head, samples, target_std=target_std)
    return model
