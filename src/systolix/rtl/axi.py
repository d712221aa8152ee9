"""AXI4 master ports and streams, with the signal names of Tensil's top level.

Tensil's ``Top`` exposes ``m_axi_dram0_*`` and ``m_axi_dram1_*`` (``axi/ExternalMaster.scala``:
id 6 bits, address 32, data as configured) and AXI4-Stream ``instruction_*`` and ``sample_*``
(``tdata``, ``tvalid``, ``tready``, ``tlast``). We use the same names so that a block design made
for Tensil's top takes ours.
"""

from __future__ import annotations

from amaranth.hdl import Signal

from systolix.rtl.config import RtlConfig

# (name, direction from the master's side, width or a key of the config)
AXI_MASTER_SIGNALS = (
    ("awready", "in", 1), ("awvalid", "out", 1), ("awid", "out", "id"), ("awaddr", "out", "addr"),
    ("awlen", "out", 8), ("awsize", "out", 3), ("awburst", "out", 2), ("awlock", "out", 2),
    ("awcache", "out", 4), ("awprot", "out", 3), ("awqos", "out", 4),
    ("wready", "in", 1), ("wvalid", "out", 1), ("wid", "out", "id"), ("wdata", "out", "data"),
    ("wstrb", "out", "strb"), ("wlast", "out", 1),
    ("bready", "out", 1), ("bvalid", "in", 1), ("bid", "in", "id"), ("bresp", "in", 2),
    ("arready", "in", 1), ("arvalid", "out", 1), ("arid", "out", "id"), ("araddr", "out", "addr"),
    ("arlen", "out", 8), ("arsize", "out", 3), ("arburst", "out", 2), ("arlock", "out", 2),
    ("arcache", "out", 4), ("arprot", "out", 3), ("arqos", "out", 4),
    ("rready", "out", 1), ("rvalid", "in", 1), ("rid", "in", "id"), ("rdata", "in", "data"),
    ("rresp", "in", 2), ("rlast", "in", 1),
)

AXI_BURST_INCR = 1


def _width(cfg: RtlConfig, w) -> int:
    return {"id": cfg.axi_id_bits, "addr": cfg.axi_addr_bits, "data": cfg.axi_data_bits,
            "strb": cfg.axi_data_bits // 8}.get(w, w)


class AxiMaster:
    """The signals of one AXI4 master port, named ``<prefix>_<signal>``."""

    def __init__(self, cfg: RtlConfig, prefix: str):
        self.prefix = prefix
        self.signals: dict[str, Signal] = {}
        for name, direction, width in AXI_MASTER_SIGNALS:
            s = Signal(_width(cfg, width), name=f"{prefix}_{name}")
            self.signals[name] = s
            setattr(self, name, s)

    def directions(self):
        """``(signal, "in"|"out")`` for every port signal."""
        return [(self.signals[name], direction) for name, direction, _ in AXI_MASTER_SIGNALS]


def axi_size(cfg: RtlConfig) -> int:
    """AxSIZE: log2 of the bytes a beat carries."""
    return (cfg.axi_data_bytes).bit_length() - 1
