"""The calibrated model against the frame rates measured on a real ZCU104."""

from __future__ import annotations

import pytest

from systolix.arch import BOARDS
from systolix.perf.fitting import FIT_POINTS, prediction_table, fit
from tests.conftest import RESNET20


@pytest.fixture(scope="module")
def table():
    return prediction_table(RESNET20)


def test_all_six_predictions_within_20_percent(table):
    assert len(table) == 6
    for row in table:
        assert abs(row.error) < 0.20, f"{row.point.label}: predicted {row.predicted_fps:.1f} fps, measured {row.point.measured_fps}"


def test_at_most_two_points_are_fitted_and_the_others_are_predictions(table):
    fitted = [r for r in table if r.fitted_on]
    assert len(fitted) == 2 and {r.point.label for r in fitted} == set(FIT_POINTS)


def test_the_boards_carry_the_fitted_values():
    params = fit(RESNET20)
    for board in BOARDS.values():
        assert board.dram_request_ns == pytest.approx(params["dram_request_ns"], rel=0.01)
        assert board.host_ns_per_scalar == pytest.approx(params["host_ns_per_scalar"], rel=0.01)
