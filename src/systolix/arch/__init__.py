"""Architectures (Tensil's ``.tarch``) and boards (an architecture with a clock and a DRAM bus)."""

from systolix.arch.architecture import TARCH_KEYS, Architecture
from systolix.arch.board import Board
from systolix.arch.presets import ARCHITECTURE_NOTES, ARCHITECTURES, BOARDS, get_architecture, get_board

__all__ = [
    "ARCHITECTURES", "ARCHITECTURE_NOTES", "BOARDS", "TARCH_KEYS", "Architecture", "Board",
    "get_architecture", "get_board",
]
