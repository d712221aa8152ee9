"""The zoo table of ``systolix bench --zoo``: real architectures compiled for one board.

For each model of ``systolix.models.torchvision_zoo`` (torchvision's constructors with random
weights, a U-Net, a YOLOv5n-style detector) at one input size: does it compile, its useful MACs
and the share the accelerator runs, the nodes left to the host and why, the latency the model of
``systolix estimate`` predicts on the board, and the output error of the bit-exact emulator
against onnxruntime next to the format's limit: the same model in onnxruntime with every
computed tensor rounded to the data type (``systolix.models.rounded.with_rounded_tensors``),
which no program in that type can be expected to beat.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper

from systolix.arch import get_board
from systolix.errors import SystolixError

ZOO_BOARD = "ultra96-v2"
# progress(description, done, total): a model's stage, and the layers scheduled (0, 0 at a start).
Progress = Callable[[str, int, int], None]


def macs_per_node(model: onnx.ModelProto) -> dict[str, int]:
    """Useful MACs of each Conv, ConvTranspose, Gemm and MatMul node (by name) for batch 1: a
    Conv output costs ``C_in / groups * kH * kW``; a ConvTranspose input element ``C_out /
    groups * kH * kW``; a Gemm or MatMul output ``K``."""
    from systolix.models.stats import _shapes

    shapes = _shapes(model)
    out: dict[str, int] = {}
    for node in model.graph.node:
        op = node.op_type
        if op not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        w = shapes.get(node.input[1])
        x = shapes.get(node.input[0])
        y = shapes.get(node.output[0])
        if w is None or x is None or y is None:
            raise SystolixError(f"{model.graph.name}: node {node.name!r} ({op}): shapes unknown")
        if op == "Conv":
            macs = int(np.prod(y)) * int(np.prod(w[1:]))
        elif op == "ConvTranspose":
            macs = int(np.prod(x)) * int(np.prod(w[1:]))
        elif op == "Gemm":
            macs = int(np.prod(y)) * int(x[0] if attrs.get("transA", 0) else x[1])
        else:
            macs = int(np.prod(y)) * int(x[-1])
        out[node.name] = macs
    return out


def _rms_lsb(a: dict[str, np.ndarray], b: dict[str, np.ndarray], lsb: float) -> float:
    diff = np.concatenate([(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)).ravel() for k in b])
    return float(np.sqrt(np.mean(diff * diff)) / lsb)


def _decisions(outputs: dict[str, np.ndarray], task: str | None) -> np.ndarray | None:
    """What the outputs decide: a classifier's top class (its one output, classes along the last
    axis), a segmenter's class per pixel (along axis 1); None for any other task."""
    if task not in ("classify", "segment") or len(outputs) != 1:
        return None
    (y,) = outputs.values()
    y = np.asarray(y)
    return np.argmax(y, axis=-1).ravel() if task == "classify" else np.argmax(y, axis=1).ravel()


def output_error(model: onnx.ModelProto, compiled, inputs: int = 1, task: str | None = None) -> dict[str, Any]:
    """RMS error (in LSB of the architecture's type) of ``compiled`` on the emulator against
    onnxruntime over ``inputs`` image-like inputs (seeds 0, 1, ...), and the limit: the RMS
    error of the same model with every computed tensor rounded to the type. With ``task``
    (``classify``, ``segment``: ``_decisions``), the share of decisions (inputs, or pixels) on
    which each agrees with onnxruntime."""
    from systolix.models import example_inputs
    from systolix.models.rounded import rounded_feeds, with_rounded_tensors
    from systolix.onnxrt import session

    dtype = compiled.summary.arch.data_type
    exact = session(model.SerializeToString())
    rounded = session(with_rounded_tensors(model, dtype).SerializeToString())
    names = [o.name for o in exact.get_outputs()]
    ours, limit, largest = [], [], 0.0
    agree = {"ours": [], "limit": []}
    started = time.perf_counter()
    for seed in range(inputs):
        feeds = example_inputs(model, seed)
        ref = dict(zip(names, exact.run(names, feeds)))
        got = compiled.run(feeds)
        best = dict(zip(names, rounded.run(names, rounded_feeds(feeds, dtype))))
        ours.append(_rms_lsb(got, ref, dtype.resolution))
        limit.append(_rms_lsb(best, ref, dtype.resolution))
        largest = max(largest, max(float(np.max(np.abs(v))) for v in ref.values()))
        truth = _decisions(ref, task)
        if truth is not None:
            agree["ours"].append(_decisions(got, task) == truth)
            agree["limit"].append(_decisions(best, task) == truth)
    out = {"rms_lsb": float(np.sqrt(np.mean(np.square(ours)))), "limit_rms_lsb": float(np.sqrt(np.mean(np.square(limit)))),
           "per_input_rms_lsb": ours, "per_input_limit_rms_lsb": limit,
           "largest_output": largest, "inputs": inputs, "emulator_seconds": time.perf_counter() - started}
    if agree["ours"]:
        out["agreement"] = float(np.mean(np.concatenate(agree["ours"])))
        out["limit_agreement"] = float(np.mean(np.concatenate(agree["limit"])))
    return out


def zoo_row(name: str, size: int | None = None, arch: str = "ultra96v2", board_name: str = ZOO_BOARD,
            error_inputs: int = 1, progress: Progress | None = None) -> dict[str, Any]:
    """One row of the zoo table: ``name`` built at ``size`` (default: its published size),
    compiled for ``arch``, timed on ``board_name``, run on the emulator against onnxruntime."""
    from systolix.compiler import compile_model
    from systolix.models.torchvision_zoo import ZOO, build_zoo
    from systolix.perf.estimate import estimate, estimate_partitioned

    spec = ZOO[name]
    size = spec.size if size is None else max(size, spec.min_size)
    row: dict[str, Any] = {"model": name, "title": spec.title, "size": size, "board": board_name, "error": None}
    say = progress or (lambda *_: None)
    say(f"{name} {size}: building", 0, 0)
    started = time.perf_counter()
    model = build_zoo(name, size)
    row["build_seconds"] = round(time.perf_counter() - started, 2)
    macs = macs_per_node(model)
    row["macs"] = sum(macs.values())
    say(f"{name} {size}: compiling", 0, 0)
    started = time.perf_counter()
    try:
        compiled = compile_model(model, arch, progress=lambda _what, done, total: say(f"{name} {size}: compiling", done, total),
                                 tune=get_board(board_name).timing)
    except SystolixError as e:
        row.update(compiles=False, error=str(e), compile_seconds=round(time.perf_counter() - started, 2))
        return row
    summary = compiled.summary
    row.update(compiles=True, compile_seconds=round(summary.seconds, 2), programs=summary.constant_cuts + 1)
    placement = summary.placement_ops
    on_host = {n for n, (_op, where) in placement.items() if where == "host"}
    row["accelerator_macs"] = sum(m for n, m in macs.items() if n not in on_host)
    row["accelerator_share"] = row["accelerator_macs"] / row["macs"] if row["macs"] else 1.0
    row["host"] = [{"node": n, "op": placement[n][0], "reason": summary.host_reasons.get(n, "")} for n in summary.host_nodes]
    say(f"{name} {size}: estimating", 0, 0)
    board = get_board(board_name)
    with tempfile.TemporaryDirectory(prefix="systolix-zoo-") as tmp:
        path = compiled.save(tmp)
        partitioned = bool(on_host) or summary.constant_cuts > 0
        est = estimate_partitioned(path, board, time_host=False)[0] if partitioned else estimate(path, board)
    row.update(latency_ms=est.latency_ms, accelerator_ms=est.accelerator_ms, fps=est.fps, bound=est.bound,
               host_timed=not on_host)
    if error_inputs:
        say(f"{name} {size}: emulator vs onnxruntime", 0, 0)
        row.update(output_error(model, compiled, error_inputs, spec.task))
    return row


def zoo_table(names: list[str] | None = None, size: int | None = None, arch: str = "ultra96v2",
              board_name: str = ZOO_BOARD, error_inputs: int = 1, progress: Progress | None = None) -> list[dict[str, Any]]:
    """The zoo table: one row per model (default: all of ``ZOO``), each at ``size`` (default:
    its published size; raised to the architecture's smallest where it is below)."""
    from systolix.models.torchvision_zoo import ZOO

    return [zoo_row(n, size, arch, board_name, error_inputs, progress) for n in (names or list(ZOO))]
