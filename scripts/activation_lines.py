"""The lines of the piecewise-linear Sigmoid, Tanh, GeLU and Softplus (``systolix.lowering.ops.sigmoid``, ``tanh``, ``gelu``, ``softplus``).

    .venv/bin/python scripts/activation_lines.py sigmoid --tol 1.0

On ``t = |x| >= 0`` both are concave, so ``min(top, min_i(a_i t + b_i))`` follows them from
above. Slopes and intercepts are FP16BP8 values (integers here, in LSB); each line is evaluated
as the SIMD unit does (the product rounded half to even, the add exact) on every grid ``t``.
Greedy: starting from the tangent at zero, add the line that keeps the error within ``tol`` LSB
the furthest, until it holds up to ``t = 8`` (past it both round to their limit). Prints the
lines and the largest error; a few seconds. Softplus fits ``-h(t) = -log(1 + exp(-t))``, concave
and rising to 0, under ``top = 0`` from its tangent at zero (``softplus(x) = max(x, 0) + h(|x|)``).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

T = np.arange(0, 2049, dtype=np.int64)  # t = 0 .. 8 in LSB
FUNCTIONS = {  # exact function on t in LSB, first line, top, intercepts to try
    # sigmoid(x) = 1/2 + V/4 with V = 2 tanh(x/2): the lines fit V, two bits finer than the output.
    "sigmoid": (512 * np.tanh(T / 512.0), (256, 0), 512, range(0, 513)),
    "tanh": (256 * np.tanh(T / 256.0), (256, 0), 256, range(0, 257)),
    # GeLU's Phi(x) = 1/2 + V/4 with V = 2 erf(x / sqrt 2), fitted on y = 409/256 x (V's slope at
    # zero is 1.596; on y it is under one, so y is the steepest line).
    "gelu": (512 * np.vectorize(math.erf)(T / (409 * math.sqrt(2.0))), (256, 0), 512, range(0, 513)),
    "softplus": (-256 * np.log1p(np.exp(-T / 256.0)), (128, -177), 0, range(-178, 1)),
}


MIN_SLOPE = {"gelu": 1, "softplus": 1}  # GeLU's V must reach 2 exactly far from zero, Softplus's lines 0


def rne(p: np.ndarray) -> np.ndarray:
    """``p / 256`` rounded half to even (the SIMD unit's multiply)."""
    return (p + 127 + ((p >> 8) & 1)) >> 8


def design(op: str, tol: float) -> tuple[list[tuple[int, int]], float]:
    f, first, top, intercepts = FUNCTIONS[op]
    b = np.array(list(intercepts))
    lines = [first]
    cur = np.minimum(rne(T * first[0]) + first[1], top)
    while np.any(np.abs(cur - f) > tol):
        reach, best = -1, None
        for a in range(MIN_SLOPE.get(op, 0), first[0]):
            comb = np.minimum(cur[:, None], rne(T[:, None] * a) + b[None, :])
            ok = np.abs(comb - f[:, None]) <= tol
            first_bad = np.where(ok.all(0), len(T), np.argmin(ok, axis=0))
            j = int(np.argmax(first_bad))
            if first_bad[j] > reach:
                reach, best = int(first_bad[j]), (a, int(b[j]))
        if reach <= int(np.argmax(np.abs(cur - f) > tol)):
            raise SystemExit(f"no line reaches further at tol {tol}")
        lines.append(best)
        cur = np.minimum(cur, rne(T * best[0]) + best[1])
    return lines, float(np.max(np.abs(cur - f)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("op", choices=sorted(FUNCTIONS))
    p.add_argument("--tol", type=float, default=1.0, help="largest error allowed, LSB")
    args = p.parse_args()
    lines, err = design(args.op, args.tol)
    print(f"{len(lines)} lines, largest error {err:.4f} LSB: {lines}")


if __name__ == "__main__":
    main()
