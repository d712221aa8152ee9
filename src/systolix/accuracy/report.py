"""The accuracy report as files: ``report.html`` (self-contained: figures as embedded PNGs) and
``accuracy.json`` (what ``systolix accuracy --json`` prints)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from systolix.accuracy.measure import AccuracyReport, Errors, LayerAccuracy

# A layer whose own error is this many times the limit's is marked as where error enters.
ENTERS = 3.0

OURS, LIMIT = "#d62728", "#1f77b4"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _fmt(e: Errors | None, key: str = "rms") -> str:
    return "-" if e is None else f"{getattr(e, key):.2f}"


def _ratio(a: Errors | None, b: Errors | None) -> float | None:
    if a is None or b is None or b.rms <= 0:
        return None
    return a.rms / b.rms


def overview_figure(report: AccuracyReport):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = report.layers
    x = np.arange(len(layers))
    fig, ax = plt.subplots(figsize=(12, 4.6))
    floor = 1e-2

    def series(values):
        return [max(v, floor) if v is not None else np.nan for v in values]

    ax.plot(x, series([layer.ours.rms for layer in layers]), "o-", color=OURS, label="ours, accumulated")
    ax.plot(x, series([layer.limit.rms for layer in layers]), "o-", color=LIMIT, label="limit, accumulated")
    ax.plot(x, series([layer.added.rms if layer.added else None for layer in layers]), "s--", color=OURS, alpha=0.6,
            label="ours, added by the layer alone")
    ax.plot(x, series([layer.added_limit.rms if layer.added_limit else None for layer in layers]), "s--", color=LIMIT,
            alpha=0.6, label="limit, added by the layer alone")
    ax.plot(x, series([layer.ours.offset for layer in layers]), "^:", color=OURS, alpha=0.8,
            label="ours, accumulated offset (the same on every input)")
    ax.plot(x, series([layer.limit.offset for layer in layers]), "^:", color=LIMIT, alpha=0.8,
            label="limit, accumulated offset")
    ax.set_yscale("log")
    ax.set_ylabel("RMS error (LSB)")
    ax.set_xlabel("layer")
    step = max(1, -(-len(layers) // 30))  # at most 30 labels: more overlap at this width
    ax.set_xticks(x[::step])
    ax.set_xticklabels([f"{layer.index}" for layer in layers][::step])
    ax.grid(True, which="both", alpha=0.3)
    # Below the axes: six series would hide the first layers' points.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=3)
    ax.set_title("Error per layer against the float model")
    fig.tight_layout()
    return fig


def _hist(ax, samples: dict, keys: list[tuple[str, str, str]], title: str) -> None:
    arrays = [np.asarray(samples[k]) for k, _, _ in keys if k in samples and np.size(samples[k])]
    if not arrays:
        ax.set_visible(False)
        return
    top = max(float(np.max(np.abs(a))) for a in arrays)
    top = max(top, 1.0)
    bins = np.linspace(-top, top, 61)
    for key, label, color in keys:
        if key in samples and np.size(samples[key]):
            ax.hist(samples[key], bins=bins, histtype="step", color=color, label=label, linewidth=1.4)
    ax.set_yscale("log")
    ax.set_xlabel("error (LSB)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)


def layer_figure(layer: LayerAccuracy):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(7.5, 2.4))
    _hist(axes[0], layer.sample, [("ours", f"ours (RMS {layer.ours.rms:.2f})", OURS),
                                  ("limit", f"limit (RMS {layer.limit.rms:.2f})", LIMIT)], "accumulated error")
    if layer.added is not None:
        _hist(axes[1], layer.sample, [("added", f"ours (RMS {layer.added.rms:.2f})", OURS),
                                      ("added_limit", f"limit (RMS {layer.added_limit.rms:.2f})", LIMIT)],
              "the layer alone, on float inputs")
    else:
        axes[1].axis("off")
        axes[1].text(0.5, 0.5, f"layer alone: {layer.added_note or 'not measured'}", ha="center", va="center",
                     fontsize=8, wrap=True)
    fig.suptitle(f"{layer.index}: {layer.name} ({'+'.join(layer.ops)})", fontsize=9)
    fig.tight_layout()
    return fig


def output_figure(report: AccuracyReport):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outs = report.outputs
    fig, axes = plt.subplots(len(outs), 2, figsize=(10, 2.8 * len(outs)), squeeze=False)
    for row, out in zip(axes, outs):
        _hist(row[0], out.sample, [("ours", f"ours (RMS {out.ours.rms:.2f})", OURS),
                                   ("limit", f"limit (RMS {out.limit.rms:.2f})", LIMIT)], f"{out.name}: error")
        ax = row[1]
        ax.scatter(out.sample["float"], out.sample["ours"], s=4, color=OURS, alpha=0.5, label="ours")
        ax.scatter(out.sample["float"], out.sample["limit"], s=4, color=LIMIT, alpha=0.5, label="limit")
        ax.set_xlabel("float value")
        ax.set_ylabel("error (LSB)")
        ax.set_title(f"{out.name}: error against value", fontsize=9)
        ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def _table(rows: list[list[str]], header: list[str] | None, classes: list[str] | None = None) -> str:
    head = "" if header is None else "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>"
    body = "".join(f"<tr class='{c}'>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>"
                   for r, c in zip(rows, classes or [""] * len(rows)))
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def html_report(report: AccuracyReport) -> str:
    import matplotlib.pyplot as plt

    compile_kind = (f"calibrated on {report.calibration_samples} samples" if report.calibration_samples
                    else "plain, gains estimated from the model (no calibration data; layers alone without gains)"
                    if report.estimated_gains else "plain (no calibration data, no gains)")
    ratio = report.rms / report.limit_rms if report.limit_rms else float("nan")
    summary = _table([
        ["model", report.model],
        ["architecture", f"{report.arch} ({report.data_type}, one LSB = {report.lsb:g})"],
        ["compile", compile_kind],
        ["inputs", f"{report.inputs}"],
        ["outputs' RMS error: ours / limit", f"{report.rms:.3f} / {report.limit_rms:.3f} LSB (x{ratio:.2f})"],
        ["inputs on which the emulator saturated", f"{report.saturated_inputs} ({report.saturation_events:,} events)"],
        ["intermediate outputs left the outputs unchanged",
         "-" if report.identical_outputs is None else ("yes, bit for bit" if report.identical_outputs else
                                                       "NO: per-layer figures come from a compile that differs")],
        ["nodes on the host", ", ".join(report.host_nodes) or "none"],
    ], None)
    outputs = _table([[o.name, "x".join(map(str, o.shape)), _fmt(o.ours), _fmt(o.ours, "offset"), _fmt(o.ours, "max"),
                       _fmt(o.limit), _fmt(o.limit, "offset"), _fmt(o.limit, "max"),
                       f"x{_ratio(o.ours, o.limit):.2f}" if _ratio(o.ours, o.limit) else "-",
                       _pct(o.agreement), _pct(o.limit_agreement)] for o in report.outputs],
                     ["output", "shape", "ours RMS", "ours offset", "ours max", "limit RMS", "limit offset", "limit max",
                      "ours / limit", "same class: ours", "same class: limit"])
    rows, classes = [], []
    for layer in report.layers:
        added = _ratio(layer.added, layer.added_limit)
        rows.append([layer.index, layer.name, "+".join(layer.ops), layer.tensor, "x".join(map(str, layer.shape)),
                     _fmt(layer.ours), _fmt(layer.ours, "offset"), _fmt(layer.ours, "max"), _fmt(layer.limit),
                     _fmt(layer.limit, "offset"), _fmt(layer.limit, "max"),
                     f"x{_ratio(layer.ours, layer.limit):.1f}" if _ratio(layer.ours, layer.limit) else "-",
                     _fmt(layer.added), _fmt(layer.added_limit), f"x{added:.1f}" if added else "-",
                     f"{layer.saturated:,}" + (f" ({layer.float_beyond:,} in float)" if layer.float_beyond else ""),
                     "-" if layer.saturated_sums is None else f"{layer.saturated_sums:,}"])
        classes.append("enters" if added is not None and added >= ENTERS
                       else ("sat" if layer.saturated or layer.saturated_sums else ""))
    layer_table = _table(rows, ["#", "layer", "ops", "output tensor", "shape", "ours RMS", "ours offset", "ours max",
                                "limit RMS", "limit offset", "limit max",
                                "ours / limit", "alone: ours RMS", "alone: limit RMS", "alone: ours / limit",
                                "saturated values", "saturation events"], classes)
    figures = []
    if report.layers:
        fig = overview_figure(report)
        figures.append(("Where error enters", _png(fig)))
        plt.close(fig)
    fig = output_figure(report)
    outputs_png = _png(fig)
    plt.close(fig)
    layer_pngs = []
    for layer in report.layers:
        fig = layer_figure(layer)
        layer_pngs.append((layer, _png(fig)))
        plt.close(fig)
    overview = "".join(f"<img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>" for t, b in figures)
    per_layer = "".join(f"<figure><img alt='layer {layer.index}' src='data:image/png;base64,{b}'></figure>"
                        for layer, b in layer_pngs)
    layers_section = f"""
<h2>Per layer</h2>
<p>Each accelerator layer whose output is a tensor of the ONNX model (a convolution with its fused batch norm,
activation and residual add, a pool, a dense layer). <b>Accumulated</b>: that tensor's error against the float model,
all earlier layers' errors included. <b>Alone</b>: the layer's own ONNX nodes compiled by themselves (calibrated on
the float values of their inputs when the model is) and run on the float model's values of its inputs: the error this
layer adds, without what it inherits. The limit's columns do the same with every tensor rounded to {html.escape(report.data_type)}
and every product exact. <b>Offset</b>: the part of the error that is the same on every input (the RMS over channels of
each channel's mean error, over the inputs and pixels): a rounded constant times a channel's mean errs so, and no pool
averages it away. Rows in <span class='enters'>red</span>: the layer alone errs {ENTERS:g} times or more what the limit does,
where error enters; in <span class='sat'>yellow</span>: some output values sit at the range's ends (saturated), or
some result inside the layer saturated (<b>saturation events</b>: its sums, products and SIMD results over all inputs,
an average pool's sums before its scaling among them, which its output may not show).</p>
{overview}
<div class='layers'>{layer_table}</div>
<h2>Error histograms per layer</h2>
<div class='grid'>{per_layer}</div>""" if report.layers else "<p>No per-layer figures (outputs only).</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(report.model)}: accuracy on {html.escape(report.arch)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1500px; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.8em; }}
.layers td:nth-child(2), .layers td:nth-child(4) {{ max-width: 18em; overflow-wrap: anywhere; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }}
td:nth-child(2), td:nth-child(3), td:nth-child(4), td:first-child, th:first-child {{ text-align: left; }}
tr.enters td, span.enters {{ background: #fde0dc; }}
tr.sat td, span.sat {{ background: #fff3c4; }}
img {{ max-width: 100%; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 0.5em; }}
figure {{ margin: 0; border: 1px solid #eee; }}
p {{ max-width: 75em; }}
</style></head><body>
<h1>{html.escape(report.model)}: accuracy on {html.escape(report.arch)}</h1>
<p>Errors in LSB of {html.escape(report.data_type)} against onnxruntime's float model, over {report.inputs} inputs.
<b>Ours</b>: the compiled program on the bit-exact emulator. <b>Limit</b>: onnxruntime with the inputs and every
computed tensor rounded to {html.escape(report.data_type)} and every product exact
(<code>systolix.models.rounded.with_rounded_tensors</code>): what no program in that format can be expected to beat.</p>
<h2>Summary</h2>{summary}
<h2>Outputs</h2>{outputs}
<img alt='outputs' src='data:image/png;base64,{outputs_png}'>
{layers_section}
</body></html>
"""


def write_report(directory: str | Path, report: AccuracyReport) -> tuple[Path, Path]:
    """``DIR/report.html`` and ``DIR/accuracy.json``, each written whole or not at all."""
    from systolix.artifacts import write_bytes_atomic

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    page = html_report(report)
    json_path, html_path = directory / "accuracy.json", directory / "report.html"
    write_bytes_atomic(json_path, (json.dumps(report.to_json(), indent=1) + "\n").encode())
    write_bytes_atomic(html_path, page.encode())
    return html_path, json_path


def require_matplotlib() -> None:
    """The report draws its figures with matplotlib, an optional dependency."""
    from systolix.perf.profile import require_matplotlib as require

    require()
