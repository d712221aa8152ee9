"""Profiles a person can read: a Chrome trace (Perfetto, chrome://tracing) and an HTML report."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from systolix.artifacts import write_text_atomic
from systolix.errors import SystolixError
from systolix.isa.codec import DecodedProgram
from systolix.perf.estimate import LAYER_BOUND_LABELS, Estimate, LayerEstimate, infer_stages, layer_estimates
from systolix.perf.samples import decode_samples, unit_intervals
from systolix.perf.simulator import ALL_UNIT_LABELS, TANDEM_UNIT, UNIT_LABELS, UNITS

KIND_NAMES = {
    (1, None): "MatMul", (3, None): "LoadWeights", (4, None): "SIMD", (0, None): "NoOp", (15, None): "Configure",
    (5, None): "LoadLUT", (2, 0): "DRAM0->local", (2, 1): "local->DRAM0", (2, 2): "DRAM1->local",
    (2, 3): "local->DRAM1", (2, 12): "acc->local", (2, 13): "local->acc", (2, 15): "local->acc (acc)",
    # The Tandem unit's (docs/tandem.md).
    (6, None): "TConfig", (7, None): "TLoop", (8, None): "TAlu", (9, None): "TCalc", (10, None): "TCmp",
    (11, None): "TPermute", (12, None): "TCast", (13, None): "TSync",
}


def _kind_ids(program: DecodedProgram) -> tuple[np.ndarray, list[str]]:
    names = sorted(set(KIND_NAMES.values()))
    index = {n: i for i, n in enumerate(names)}
    ids = np.zeros(len(program), dtype=np.int64)
    for (op, flow), name in KIND_NAMES.items():
        mask = program.opcode == op if flow is None else (program.opcode == op) & (program.flags == flow)
        ids[mask] = index[name]
    return ids, names


def layer_entries(est: Estimate, program: DecodedProgram) -> tuple[list[dict], bool]:
    """The layer map's entries, or stages inferred from the program (second value True)."""
    if est.layers is not None:
        return [{"name": l.name, "ops": l.ops, "first": l.first, "end": l.end, "macs": l.macs} for l in est.layers], False
    return infer_stages(program), True


def trace_events(est: Estimate, program: DecodedProgram, merge_gap: float = 64.0) -> list[dict]:
    """Chrome trace events: one track per unit, runs of alike instructions merged.

    A slice covers consecutive instructions of one layer on one unit when each starts at most
    ``merge_gap`` clocks after the previous one ended; it is named by the layer and the
    instruction kinds it holds (``conv1 LoadWeights+MatMul``), with a count of each in ``args``.
    """
    entries, _ = layer_entries(est, program)
    layer_of = np.full(len(program), -1, dtype=np.int64)
    for k, e in enumerate(entries):
        layer_of[e["first"]:e["end"]] = k
    layer_names = [e["name"] for e in entries] + ["(no layer)"]
    kind, kind_names = _kind_ids(program)
    us_per_cycle = 1.0 / est.board.clock_mhz
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                           "args": {"name": f"TCU {est.board.name}"}}]
    intervals = unit_intervals(program, est.timeline)
    units = [u for u in (*UNITS, TANDEM_UNIT) if u in intervals]  # the Tandem unit's track when it works
    for tid, unit in enumerate(units, start=1):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": ALL_UNIT_LABELS[unit]}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
    for tid, unit in enumerate(units, start=1):
        idx, s, e = intervals[unit]
        if idx.size == 0:
            continue
        layer = layer_of[idx]
        brk = np.ones(idx.size, dtype=bool)
        brk[1:] = (layer[1:] != layer[:-1]) | (s[1:] - e[:-1] > merge_gap) | (s[1:] < s[:-1])
        starts = np.flatnonzero(brk)
        ends = np.append(starts[1:], idx.size)
        run_start = s[starts]
        run_end = np.maximum.reduceat(e, starts)
        counts = {k: np.add.reduceat((kind[idx] == k).astype(np.int64), starts) for k in np.unique(kind[idx])}
        for r, (a, b, t0, t1) in enumerate(zip(starts, ends, run_start, run_end)):
            kinds = {kind_names[k]: int(c[r]) for k, c in counts.items() if c[r]}
            events.append({
                "name": f"{layer_names[int(layer[a])]} {'+'.join(kinds)}", "cat": "+".join(kinds), "ph": "X",
                "pid": 1, "tid": tid, "ts": round(float(t0) * us_per_cycle, 4),
                "dur": round(max(float(t1 - t0), 0.0) * us_per_cycle, 4),
                "args": {"instructions": int(b - a), "first": int(idx[a]), "last": int(idx[b - 1]), **kinds},
            })
    return events


def write_trace(path: str | Path, est: Estimate, program: DecodedProgram, merge_gap: float = 64.0) -> int:
    """Write the Chrome trace JSON; returns the number of events."""
    events = trace_events(est, program, merge_gap)
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"board": est.board.name, "cycles": est.cycles, "clock_mhz": est.board.clock_mhz}}
    write_text_atomic(Path(path), json.dumps(doc, separators=(",", ":")))
    return len(events)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


UNIT_COLORS = {"decoder": "#9e9e9e", "dram0": "#1f77b4", "dram1": "#17becf", "port_a": "#bcbd22",
               "port_b": "#8c564b", "array": "#d62728", "acc": "#ff7f0e"}


def layer_figure(layers: list[LayerEstimate], clock_mhz: float, title: str):
    """Time per layer, split by unit: each unit's busy time, and the time the layer adds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(layers)
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.22 * count + 1.5)))
    y = np.arange(count)
    height = 0.8 / len(UNITS)
    for j, unit in enumerate(UNITS):
        ms = [l.unit_cycles[unit] / (clock_mhz * 1e3) for l in layers]
        ax.barh(y - 0.4 + (j + 0.5) * height, ms, height=height, color=UNIT_COLORS[unit], label=UNIT_LABELS[unit])
    ax.scatter([l.cycles / (clock_mhz * 1e3) for l in layers], y, marker="D", s=14, color="black",
               label="(time the layer adds)", zorder=3)
    ax.set_yticks(y, [l.name for l in layers], fontsize=7 if count > 30 else 9)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="busy time of", title_fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return fig


def roofline_figure(layers: list[LayerEstimate], est: Estimate, title: str):
    """Each layer as a point: MACs per DRAM byte against the MAC rate it reaches."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    board = est.board
    n = board.architecture.array_size
    peak = n * n * board.clock_mhz * 1e6 / 1e9  # GMAC/s
    bw = board.bytes_per_cycle * board.dram_efficiency * board.clock_mhz * 1e6 / 1e9  # GB/s, one port
    pts = [(l.macs / l.dram_bytes if l.dram_bytes else np.nan, l.macs / (l.cycles / (board.clock_mhz * 1e6)) / 1e9 if l.cycles else 0.0, l)
           for l in layers if l.macs > 0]
    fig, ax = plt.subplots(figsize=(8, 5))
    finite = [p[0] for p in pts if np.isfinite(p[0])]
    lo = min(finite + [0.1]) / 2
    hi = max(finite + [peak / bw * 4]) * 2
    on_chip = hi  # layers that move nothing through DRAM sit at the right edge
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, np.minimum(peak, bw * x), color="black", lw=1.5, label=f"roof: {peak:.1f} GMAC/s, {bw:.2f} GB/s")
    for ai, rate, l in pts:
        xi = ai if np.isfinite(ai) else on_chip
        ax.scatter(xi, rate, s=24, color="#d62728" if np.isfinite(ai) else "#1f77b4")
    if any(not np.isfinite(p[0]) for p in pts):
        ax.scatter([], [], color="#1f77b4", label="no DRAM traffic (drawn at the right edge)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MACs per DRAM byte")
    ax.set_ylabel("GMAC/s reached")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(which="both", alpha=0.3)
    return fig


def samples_figure(words: np.ndarray, interval: float, clock_mhz: float):
    """Program counter and each bus's valid/ready bits over the sampled time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = decode_samples(words)
    t = np.arange(words.size) * interval / clock_mhz / 1e3  # ms
    buses = ["instruction", "mem_port_a", "mem_port_b", "dram0", "dram1", "dataflow", "acc", "array"]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.4]})
    a1.plot(t, d["program_counter"], lw=1)
    a1.set_ylabel("program counter")
    a1.set_title(f"Performance samples every {interval:g} clocks")
    # 0 idle, 1 stalled (valid, not ready), 2 transferring (valid and ready)
    state = np.array([np.where(d[f"{b}_valid"], np.where(d[f"{b}_ready"], 2, 1), 0) for b in buses])
    from matplotlib.colors import ListedColormap
    a2.imshow(state, aspect="auto", interpolation="nearest", cmap=ListedColormap(["#f0f0f0", "#e6550d", "#31a354"]),
              extent=(t[0] if t.size else 0, t[-1] if t.size else 1, len(buses) - 0.5, -0.5), vmin=0, vmax=2)
    a2.set_yticks(range(len(buses)), buses)
    a2.set_xlabel("ms (green: valid and ready, orange: valid, not ready, grey: idle)")
    return fig


def _table(rows: list[list[str]], header: list[str] | None) -> str:
    head = "" if header is None else "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def require_matplotlib() -> None:
    """The report draws its figures with matplotlib, an optional dependency."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystolixError("the report's figures need matplotlib: pip install 'systolix[report]' (./dev installs it)") from None


def write_report(path: str | Path, est: Estimate, program: DecodedProgram, model_name: str,
                 samples: np.ndarray | None = None, sample_interval: float = 0.0) -> None:
    """The HTML report: summary, unit shares, time per layer by unit, roofline, samples."""
    import matplotlib.pyplot as plt

    entries, inferred = layer_entries(est, program)
    n = est.board.architecture.array_size
    layers = est.layers if est.layers is not None else layer_estimates(
        program, est.timeline, entries, est.board.architecture.vector_bytes, n, macs_from_array=True)
    what = "inferred stages (Tensil's compile has no layer map; MACs are array MACs incl. padding)" if inferred else "layers"
    figs = []
    fig = layer_figure(layers, est.board.clock_mhz, f"Time per {'stage' if inferred else 'layer'}, split by unit")
    figs.append(("Time per layer, split by unit", _png(fig)))
    plt.close(fig)
    fig = roofline_figure(layers, est, f"Roofline ({'stages' if inferred else 'layers'} as points)")
    figs.append(("Roofline", _png(fig)))
    plt.close(fig)
    if samples is not None and samples.size:
        fig = samples_figure(samples, sample_interval, est.board.clock_mhz)
        figs.append(("Performance samples", _png(fig)))
        plt.close(fig)
    summary = _table([
        ["board", f"{est.board.name} ({n}x{n} at {est.board.clock_mhz:g} MHz)"],
        ["instructions", f"{est.instructions:,}"],
        ["cycles", f"{est.cycles:,.0f}"],
        ["accelerator / host / total", f"{est.accelerator_ms:.3f} / {est.host_ms:.3f} / {est.latency_ms:.3f} ms"],
        ["frames per second", f"{est.fps:.1f}"],
        ["MAC efficiency", f"{est.mac_efficiency:.1%} ({est.macs_source})"],
        ["bound by", est.bound],
    ], None)
    units = _table([[ALL_UNIT_LABELS[u], f"{est.unit_busy[u]:,.0f}", f"{est.unit_shares[u]:.1%}"] for u in est.unit_busy],
                   ["unit", "busy clocks", "share"])
    layer_rows = [[l.name, " ".join(l.ops), f"{l.instructions:,}", f"{l.macs:,}", f"{l.cycles / (est.board.clock_mhz * 1e3):.4f}",
                   f"{l.macs / (n * n * l.cycles):.1%}" if l.cycles else "-", f"{l.dram_bytes:,}",
                   LAYER_BOUND_LABELS[l.bound], f"x{l.cycles / l.compute_cycles(n):,.1f}" if l.macs else "-"] for l in layers]
    layer_table = _table(layer_rows, ["name", "ops", "instructions", "MACs", "ms", "MAC eff.", "DRAM bytes", "bound by",
                                      "x compute bound"])
    images = "".join(f"<h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>" for t, b in figs)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(model_name)}: latency profile</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
</style></head><body>
<h1>{html.escape(model_name)}: latency profile</h1>
<p>Systolix latency model (docs/latency-model.md). Per-layer rows are {html.escape(what)}.</p>
<h2>Summary</h2>{summary}
<h2>Units</h2>{units}
{images}
<h2>Per {'stage' if inferred else 'layer'}</h2>{layer_table}
</body></html>
"""
    write_text_atomic(Path(path), doc)
