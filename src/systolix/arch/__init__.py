"""Architectures (Tensil's ``.tarch``) and boards (an architecture with a clock and a DRAM bus)."""

from systolix.arch.architecture import TANDEM_KEYS, TARCH_KEYS, Architecture, TandemConfig
from systolix.arch.board import Board
from systolix.arch.presets import ARCHITECTURE_NOTES, ARCHITECTURES, BOARDS, get_architecture, get_board

__all__ = [
    "ARCHITECTURES", "ARCHITECTURE_NOTES", "BOARDS", "TANDEM_KEYS", "TARCH_KEYS", "Architecture", "TandemConfig", "Board",
    "get_architecture", "get_board",
]
