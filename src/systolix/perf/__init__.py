"""The latency model: a timing simulator of the Tensor Compute Unit, fitted to a real ZCU104.

``estimate(program_or_tmodel, board)`` gives cycles, latency, frame rate, unit shares, what
bounds the run and (with a layer map) per-layer times (``estimate_partitioned`` for a model
split between accelerator and host); ``systolix.perf.profile`` writes a
Chrome trace and an HTML report; ``systolix.perf.fitting`` fits and checks the model.
See ``docs/latency-model.md``.
"""

from systolix.perf.estimate import Estimate, LayerEstimate, estimate, estimate_partitioned, infer_stages, load_program
from systolix.perf.simulator import UNITS, Timeline, TimingParameters, simulate

__all__ = [
    "Estimate", "LayerEstimate", "Timeline", "TimingParameters", "UNITS", "estimate", "estimate_partitioned",
    "infer_stages", "load_program", "simulate",
]
