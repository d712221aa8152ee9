"""Where a compiled model's error enters: ``measure`` (per layer and at the outputs, against the
float model and against FP16BP8's limit) and ``write_report`` (``report.html``, ``accuracy.json``).
``systolix accuracy`` is the command line; ``benchmarks/bench_accuracy.py`` uses the same."""

from systolix.accuracy.measure import (AccuracyError, AccuracyReport, Errors, LayerAccuracy, OutputAccuracy,
                                       measure, random_inputs)

__all__ = ["AccuracyError", "AccuracyReport", "Errors", "LayerAccuracy", "OutputAccuracy", "measure",
           "random_inputs"]
