"""Who reads and who writes each activation of an HIR program: what fusion and folding ask
before they merge two layers."""

from __future__ import annotations

from systolix.ir.hir import Activation, ConvLayer, HirProgram, Layer


def reader_counts(hir: HirProgram) -> dict[int, int]:
    """Per activation (by ``id``), how many reads of it the layers make, a read of a slice or
    relabelling counting for every tensor it is part of."""
    counts: dict[int, int] = {}
    for layer in hir.layers:
        for act in layer.reads():
            a = act
            while a is not None:
                counts[id(a)] = counts.get(id(a), 0) + 1
                a = a.parent[0] if a.parent is not None else None
    return counts


class Uses:
    """Reads and producers of an HIR program's activations, kept current while a pass merges
    layers (a merged layer reads and writes what the two did, so the counts hold)."""

    def __init__(self, hir: HirProgram):
        self.readers = reader_counts(hir)
        self.outputs = {id(a) for a in hir.outputs.values()}
        self.producer: dict[int, ConvLayer] = {}

    def produced(self, layer: Layer) -> None:
        self.producer[id(layer.output)] = layer

    def joinable(self, act: Activation) -> ConvLayer | None:
        """The open conv layer whose whole output ``act`` is, if ``act`` is read only once, is not
        a program output and is no slice of another tensor: the layer may take in the op that
        reads it (fusion) or fold it into its weights."""
        layer = self.producer.get(id(act))
        if (not isinstance(layer, ConvLayer) or not layer.open or act.parent is not None or id(act) in self.outputs
                or self.readers.get(id(act), 0) != 1):
            return None
        return layer


def written_before(layers: list[Layer], act: Activation, layer: Layer) -> bool:
    """Whether every layer writing any vector of ``act`` comes before ``layer`` in ``layers``."""
    position = next(k for k, other in enumerate(layers) if other is layer)
    return all(k < position for k, other in enumerate(layers) if other.output.overlaps(act))
