"""The scheduler: graph IR to layers (HIR) to instructions (LIR). ``pipeline`` lists the passes."""

from systolix.scheduler.codegen import STRATEGIES, ConstantsDoNotFit, LirProgram, SchedulingError, schedule
from systolix.scheduler.hir import Activation, ConvLayer, HirProgram, MaxPoolLayer, PostOp, RemapLayer
from systolix.scheduler.lowering import Unsupported, lower
from systolix.scheduler.rollup import roll_up

__all__ = [
    "STRATEGIES", "Activation", "ConstantsDoNotFit", "ConvLayer", "HirProgram", "LirProgram", "MaxPoolLayer", "PostOp", "RemapLayer",
    "SchedulingError", "Unsupported", "lower", "roll_up", "schedule",
]
