"""The benchmark tables of ``systolix bench``, one function per table.

Table 2 (``tensil_programs_table``) puts Tensil's real ZCU104 programs under the calibrated
model next to the frame rates measured on the board. Table 1 (the seed's three benchmark
models on its three boards) needs the compiler and the model builders; it plugs in here as
``models_table`` once they exist.
"""

from __future__ import annotations

import datetime as _dt
import subprocess
from pathlib import Path
from typing import Any

from systolix.perf.calibration import calibration_table


def provenance() -> dict[str, str]:
    """Date (UTC) and commit the tables were produced at."""
    commit = "uncommitted"
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        if out.returncode == 0 and out.stdout.strip():
            commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def tensil_programs_table(resnet20_dir: Path | None = None) -> list[dict[str, Any]]:
    """Tensil's five ResNet-20 programs (and the 512-bit run): predicted against measured."""
    rows = []
    for r in calibration_table(resnet20_dir):
        e = r.estimate
        rows.append({
            "program": f"Tensil {r.point.directory}/",
            "board": e.board.name,
            "bus_bits": e.board.dram_bus_bits,
            "instructions": e.instructions,
            "latency_ms": e.latency_ms,
            "accelerator_ms": e.accelerator_ms,
            "host_ms": e.host_ms,
            "fps": e.fps,
            "measured_fps": r.point.measured_fps,
            "error": r.error,
            "mac_efficiency": e.mac_efficiency,
            "bound": e.bound,
            "fitted_on": r.fitted_on,
        })
    return rows
