"""Fitting the latency model to frame rates measured on a real ZCU104.

``expected.json`` beside Tensil's five ResNet-20 programs holds six measured frame rates
(the baseline program also on a 512-bit bus). Two parameters are fitted, on two points,
and the other four points are predictions:

- ``host_ns_per_scalar`` on ``ultra_ram_local_vars_and_consts/``: that program keeps
  activations and constants on chip, so apart from its input and output it never touches
  DRAM; the measured frame time minus the simulated accelerator time is the host's work.
- ``dram_request_ns`` on ``ultra_ram/``: the DRAM-heavy program (weights loaded with
  strided, one-request-per-vector moves); solved by bisection with the host term fixed.

Every other parameter is physical (see ``systolix.arch.board``). The fit alternates the two
one-dimensional solves until both stop moving (the host point barely depends on the request
cost: it makes 17 DRAM requests a frame).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from systolix.arch import Board, get_board
from systolix.artifacts import TModel
from systolix.errors import ArtifactError
from systolix.perf.estimate import Estimate, estimate, load_program

# The measurement labels of expected.json, in its order: (label, program directory, board).
MEASURED_POINTS = (
    ("baseline/ (128-bit AXI data ports)", "baseline", "zcu104"),
    ("baseline/ with a dual-clock 512-bit AXI interface (same program)", "baseline", "zcu104-512"),
    ("ultra_ram/", "ultra_ram", "zcu104"),
    ("ultra_ram_local_vars/", "ultra_ram_local_vars", "zcu104"),
    ("ultra_ram_local_consts/", "ultra_ram_local_consts", "zcu104"),
    ("ultra_ram_local_vars_and_consts/", "ultra_ram_local_vars_and_consts", "zcu104"),
)
HOST_FIT_POINT = "ultra_ram_local_vars_and_consts/"
REQUEST_FIT_POINT = "ultra_ram/"
FIT_POINTS = (HOST_FIT_POINT, REQUEST_FIT_POINT)


def default_resnet20_dir() -> Path:
    """``../shared/conformance/tensil/resnet20_zcu104`` beside the project."""
    return Path(__file__).resolve().parents[3].parent / "shared" / "conformance" / "tensil" / "resnet20_zcu104"


@dataclass
class MeasuredPoint:
    label: str
    directory: str
    board: str
    measured_fps: float
    tmodel: Path


@dataclass
class Prediction:
    point: MeasuredPoint
    estimate: Estimate
    fitted_on: bool

    @property
    def predicted_fps(self) -> float:
        return self.estimate.fps

    @property
    def error(self) -> float:
        """Relative error of the predicted frame rate."""
        return self.predicted_fps / self.point.measured_fps - 1.0


def measured_points(resnet20_dir: Path | None = None) -> list[MeasuredPoint]:
    """The six measured points, each with its program's ``.tmodel``."""
    root = Path(resnet20_dir or default_resnet20_dir())
    path = root / "expected.json"
    try:
        data = json.loads(path.read_text())
        fps = data["measured_on_zcu104_at_100MHz_fps"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise ArtifactError(f"{path}: cannot read the measured frame rates: {e}") from None
    points = []
    for label, directory, board in MEASURED_POINTS:
        if label not in fps:
            raise ArtifactError(f"{path}: no measured frame rate for {label!r}")
        models = sorted((root / directory).glob("*.tmodel"))
        if len(models) != 1:
            raise ArtifactError(f"{root / directory}: expected one .tmodel, found {len(models)}")
        points.append(MeasuredPoint(label, directory, board, float(fps[label]), models[0]))
    return points


def _board_for(point: MeasuredPoint, model: TModel, params: dict) -> Board:
    return get_board(point.board).with_architecture(model.arch).with_parameters(**params)


def _bisect(f, lo: float, hi: float, tolerance: float) -> float:
    """The root of ``f``, increasing on ``[lo, hi]`` with ``f(lo) < 0 <= f(hi)``, to ``tolerance``."""
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit(resnet20_dir: Path | None = None, iterations: int = 4) -> dict[str, float]:
    """Fit ``host_ns_per_scalar`` and ``dram_request_ns`` on the two fit points."""
    points = {p.label: p for p in measured_points(resnet20_dir)}
    loaded = {label: load_program(points[label].tmodel) for label in FIT_POINTS}
    params = {"host_ns_per_scalar": 0.0, "dram_request_ns": 0.0}

    def frame_ms(label: str, p: dict) -> Estimate:
        model, program = loaded[label]
        return estimate(program, _board_for(points[label], model, p), model=model)

    for _ in range(iterations):
        # Host: linear in its parameter, so solved in closed form.
        host_point = points[HOST_FIT_POINT]
        e = frame_ms(HOST_FIT_POINT, {**params, "host_ns_per_scalar": 0.0})
        target_ms = 1e3 / host_point.measured_fps
        params["host_ns_per_scalar"] = max(0.0, (target_ms - e.accelerator_ms) * 1e6 / e.io_scalars)
        # Request cost: the frame time rises monotonically with it.
        dram_point = points[REQUEST_FIT_POINT]
        target = 1e3 / dram_point.measured_fps

        def residual(ns: float) -> float:
            return frame_ms(REQUEST_FIT_POINT, {**params, "dram_request_ns": ns}).latency_ms - target

        if residual(0.0) >= 0:
            params["dram_request_ns"] = 0.0
        else:
            params["dram_request_ns"] = _bisect(residual, 0.0, 5000.0, 0.01)
    return {k: round(v, 2) for k, v in params.items()}


def prediction_table(resnet20_dir: Path | None = None, params: dict | None = None) -> list[Prediction]:
    """Predictions for all six measured points under the boards' parameters (or ``params``)."""
    rows = []
    for point in measured_points(resnet20_dir):
        model, program = load_program(point.tmodel)
        board = _board_for(point, model, params or {})
        rows.append(Prediction(point, estimate(program, board, model=model), point.label in FIT_POINTS))
    return rows
