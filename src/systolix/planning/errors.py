"""What planning refuses: a layer or the program's constants do not fit the memories."""

from __future__ import annotations

from systolix.errors import SystolixError

STRATEGIES = ("local-isolated", "local-vars", "local-consts", "local-vars-and-consts")


class SchedulingError(SystolixError):
    """A layer does not fit the architecture's memories."""


class PoolWindowsDoNotFit(SchedulingError):
    """A conv's tail saves a fused ``k x k`` max pool (``fuse_pools``), but fewer than ``k`` of its
    output rows fit a tile even for one image (``fuse_pools`` estimates the band and leaves such
    pools alone, so this is a safety net; a batch program's images never share a tile that would
    split windows): the compiler then compiles again with the pools as layers of their own."""

    def __init__(self, layer: str, window: int, rows: int):
        self.layer, self.window, self.rows = layer, window, rows
        self.reason = f"layer {layer!r} saves a {window}x{window} max pool from its tail but only {rows} output rows fit a tile"
        super().__init__(f"{self.reason}; compile with --no-fuse-pools (fuse_pools=False)")


class ConstantsDoNotFit(SchedulingError):
    """The program's constants need more of DRAM1 (or local memory) than the architecture has.

    ``layers`` lists each layer's name, ONNX node names and vectors of constants, in program
    order: enough for the compiler to cut the graph into programs that fit.
    """

    def __init__(self, message: str, needed: int, depth: int, where: str, layers: list[tuple[str, list[str], int]],
                 context: str = ""):
        super().__init__(message)
        self.needed, self.depth, self.where, self.layers = needed, depth, where, layers
        self.context = context  # what the message starts with (the strategy, where it matters)
