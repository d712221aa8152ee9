"""``systolix demo``: the main job on the bundled example.

Compiles a real trained model (the digits CNN in ``systolix/examples``), runs its held-out images
on the bit-exact emulator, compares with onnxruntime, and prints the latency on every board.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from systolix.cli import app
from systolix.cli.common import console

DEMO_ARCH = "pynqz1"


def _example_files() -> tuple[Path, Path]:
    root = resources.files("systolix") / "examples"
    return Path(str(root / "digits_cnn.onnx")), Path(str(root / "digits_heldout.npz"))


@app.command()
def demo(
    workdir: Path = typer.Option(Path("out/demo"), "--workdir", help="Where to write the compiled artifacts."),
    arch: str = typer.Option(DEMO_ARCH, "--arch", "-a", help="Architecture to compile for and run on."),
) -> None:
    """Compile the bundled digits CNN, run it on the emulator against onnxruntime, print its latency."""
    from systolix.arch import BOARDS
    from systolix.cli.common import resolve_arch
    from systolix.compiler import compile_model
    from systolix.onnxrt import session as ort_session
    from systolix.perf import estimate

    onnx_path, data_path = _example_files()
    with np.load(data_path) as f:
        x, y = f["x"].astype(np.float32), f["y"]
    architecture = resolve_arch(arch)
    console.rule(f"[bold]Systolix demo[/]: {onnx_path.name}, a CNN trained on scikit-learn's digits")

    start = time.perf_counter()
    compiled = compile_model(onnx_path, architecture)
    compiled.save(workdir)
    compile_s = time.perf_counter() - start
    s = compiled.summary
    console.print(f"compiled for [bold]{arch}[/] ({architecture.array_size}x{architecture.array_size}, "
                  f"{architecture.data_type.name}) in {compile_s:.2f} s: {s.instructions:,} instructions, "
                  f"{len(s.layers)} layers, {s.macs:,} useful MACs; artifacts in {workdir}/")

    session = ort_session(onnx_path.read_bytes(), source=str(onnx_path))
    in_name = session.get_inputs()[0].name
    # The exported model takes one image (batch 1), as deployed models usually do.
    reference = np.concatenate([session.run(None, {in_name: x[i : i + 1]})[0] for i in range(len(x))])
    start = time.perf_counter()
    # One batched pass over the program: a leading batch axis on the input.
    ours = next(iter(compiled.run({in_name: x[:, None]}).values()))
    run_s = time.perf_counter() - start
    ours = ours.reshape(reference.shape)

    err = np.abs(ours - reference)
    agree = float(np.mean(ours.argmax(1) == reference.argmax(1)))
    acc_ref = float(np.mean(reference.argmax(1) == y))
    acc_ours = float(np.mean(ours.argmax(1) == y))
    t = Table(title=f"{len(x)} held-out images: emulator (bit-exact {architecture.data_type.name}) vs onnxruntime (float32)")
    for col in ("", "onnxruntime", "systolix emulator"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row("accuracy", f"{acc_ref:.2%}", f"{acc_ours:.2%}")
    t.add_row("same class as onnxruntime", "", f"{agree:.2%}")
    t.add_row("max |logit error|", "", f"{err.max():.4f}")
    t.add_row("mean |logit error|", "", f"{err.mean():.4f}")
    t.add_row("wall time", "", f"{run_s:.2f} s ({len(x) / run_s:,.0f} images/s)")
    console.print(t)

    lat = Table(title="Predicted latency of this model (systolix latency model, docs/latency-model.md)")
    for col in ("board", "array", "MHz", "latency ms", "frames/s", "MAC eff.", "bound by"):
        lat.add_column(col, justify="left" if col in ("board", "bound by") else "right", no_wrap=True)
    for name, board in BOARDS.items():
        board_model = compile_model(onnx_path, board.architecture, tune=board.timing)
        board_dir = workdir / name
        board_model.save(board_dir)
        e = estimate(next(board_dir.glob("*.tmodel")), board)
        a = board.architecture
        lat.add_row(name, f"{a.array_size}x{a.array_size}", f"{board.clock_mhz:g}", f"{e.latency_ms:.3f}",
                    f"{e.fps:,.0f}", f"{e.mac_efficiency:.1%}", e.bound)
    console.print(lat)
