"""Encode a program and describe it in a ``.tmodel``; write the files atomically.

The ``.tmodel`` keeps Tensil's keys exactly (so Tensil's own driver can load a model that runs
wholly on the accelerator) and adds the ``systolix`` key of ``docs/tmodel-extension.md``:
tensor shapes and layouts of inputs and outputs, and the layer map.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from systolix.arch import Architecture
from systolix.artifacts import ConstsRef, ProgramRef, TensorSpan, TModel, pack_scalars, write_bytes_atomic
from systolix.backend.encoder import encode_lir, to_isa
from systolix.ir.lir import LirProgram, TensorPlacement
from systolix.isa import InstructionLayout


@dataclass
class Artifacts:
    """A compiled program's files, in memory: ``files[name] = bytes``; the manifest's name first."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def tmodel_name(self) -> str:
        return f"{self.name}.tmodel"

    def save(self, directory: str | Path) -> Path:
        """Write every file atomically; the ``.tmodel`` last, so it never names a missing file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        try:
            for fname, data in self.files.items():
                if fname != self.tmodel_name:
                    write_bytes_atomic(directory / fname, data)
                    written.append(directory / fname)
            write_bytes_atomic(directory / self.tmodel_name, self.files[self.tmodel_name])
        except BaseException:
            for p in written:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            raise
        return directory / self.tmodel_name

    def text(self) -> str:
        return "\n".join(f"{name}: {len(data):,} bytes" for name, data in self.files.items()) + "\n"


def io_entry(t: TensorPlacement) -> dict:
    entry = {"name": t.name, "shape": list(t.shape), "layout": {"perm": t.perm, "padded_channels": t.padded_channels}}
    if t.pack is not None:
        entry["pack"] = dict(t.pack)
    return entry


def build_artifacts(name: str, arch: Architecture, lir: LirProgram, listing: bool = False) -> Artifacts:
    """The ``.tprog``, ``.tdata``, ``.tmodel`` (and ``.tasm`` with ``listing``) of one bound program."""
    layout = InstructionLayout.of(arch)
    prog = encode_lir(lir.instructions, layout)
    tdata = pack_scalars(lir.consts.reshape(-1), arch.data_type)
    files: dict[str, bytes] = {}
    prog_name, data_name = f"{name}.tprog", f"{name}.tdata"
    files[prog_name] = prog
    consts = []
    if lir.consts.shape[0]:
        files[data_name] = tdata
        consts.append(ConstsRef(file_name=data_name, base=0, size=int(lir.consts.shape[0])))
    extension = {
        "version": 1,
        "inputs": [io_entry(t) for t in lir.inputs],
        "outputs": [io_entry(t) for t in lir.outputs],
        "layers": [{"name": r.name, "ops": r.ops, "first": r.first, "end": r.end, "macs": r.macs} for r in lir.layers],
        "segments": None,
        "strategy": lir.strategy,
    }
    if lir.batch > 1:
        extension["batch"] = lir.batch  # each span holds the images one after another
    manifest = TModel(
        name=name,
        prog=ProgramRef(file_name=prog_name, size=len(prog)),
        consts=consts,
        inputs=[TensorSpan(name=t.name, base=t.base, size=t.vectors) for t in lir.inputs],
        outputs=[TensorSpan(name=t.name, base=t.base, size=t.vectors) for t in lir.outputs],
        arch=arch,
        load_consts_to_local=lir.load_consts_to_local,
        systolix=extension,
    )
    files[f"{name}.tmodel"] = json.dumps(manifest.to_json_dict(), separators=(",", ":")).encode()
    if listing:
        from systolix.isa.assembly import format_program

        header = f"{name}: {len(lir.instructions)} instructions for {arch.array_size}x{arch.array_size} {arch.data_type.name}"
        text = format_program([to_isa(ins) for ins in lir.instructions], header)
        files[f"{name}.tasm"] = _annotate(text, lir).encode()
    return Artifacts(name, files)


def encode(lir: LirProgram, ctx) -> Artifacts:
    """The pass: the program's files, named after the segment."""
    return build_artifacts(ctx.segment, ctx.arch, lir, ctx.listing)


def _annotate(text: str, lir: LirProgram) -> str:
    """Mark where each layer starts in the listing."""
    starts = {r.first: r for r in lir.layers}
    out = []
    index = 0
    for line in text.splitlines():
        if line.startswith("#"):
            out.append(line)
            continue
        if index in starts:
            r = starts[index]
            out.append(f"# layer {r.name} ({', '.join(r.ops)}): instructions {r.first}..{r.end - 1}")
        out.append(line)
        index += 1
    return "\n".join(out) + "\n"
