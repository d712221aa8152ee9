"""NumPy ``.npy`` and ``.npz`` files, read defensively.

``read_arrays(path)`` never unpickles (object arrays are refused), checks every array's header
(shape, type) against the bytes the file holds before reading it, and refuses a file whose
arrays together would take more memory than ``limit`` bytes, so a 100-byte file that claims a
terabyte is an error, not an allocation. Every failure is an ``ArtifactError`` (or the caller's
``SystolixError`` subclass) naming the file and, in an ``.npz``, the array.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from systolix.artifacts.files import clip, open_regular, shown
from systolix.errors import ArtifactError, SystolixError

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK"
#: Most arrays an ``.npz`` may hold.
MAX_MEMBERS = 4096
#: Longest ``.npy`` header we parse (NumPy's own default limit).
MAX_HEADER_BYTES = 10000


def _header(f: IO[bytes], where: str, error: type[SystolixError]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype of the ``.npy`` at ``f``'s position; ``f`` is left after the header."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=MAX_HEADER_BYTES)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=MAX_HEADER_BYTES)
        else:
            raise ValueError(f"unknown .npy format version {version}")
    except Exception as e:  # NumPy raises ValueError, EOFError, SyntaxError... for a broken header
        raise error(f"{where}: not a readable .npy array (bad header: {clip(str(e) or type(e).__name__, 100)})") from None
    if dtype.hasobject:
        raise error(f"{where}: holds Python objects (a pickled object array), which are never loaded; save numbers")
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise error(f"{where}: holds {dtype} values, not numbers")
    return tuple(int(d) for d in shape), bool(fortran), dtype


def _read_array(f: IO[bytes], where: str, available: int, error: type[SystolixError],
                budget: list[int], limit: int) -> np.ndarray:
    """One ``.npy`` array from ``f`` with at most ``available`` bytes in it (header included)."""
    start = f.tell()
    shape, fortran, dtype = _header(f, where, error)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    have = available - (f.tell() - start)
    if nbytes > have:
        raise error(f"{where}: truncated: its header says {list(shape)} {dtype} ({nbytes:,} bytes) but only "
                    f"{max(have, 0):,} bytes follow")
    budget[0] += nbytes
    if budget[0] > limit:
        from systolix.limits import format_bytes, limit_source

        raise error(f"{where}: the arrays would need {format_bytes(budget[0])} of memory, more than the memory limit of "
                    f"{format_bytes(limit)} ({limit_source()})")
    try:
        data = f.read(nbytes)
    except Exception as e:  # zlib.error, BadZipFile (CRC), EOFError from a damaged member
        raise error(f"{where}: cannot read the array's data ({clip(str(e) or type(e).__name__, 100)})") from None
    if len(data) != nbytes:
        raise error(f"{where}: truncated: {nbytes:,} bytes of data expected, {len(data):,} found")
    array = np.frombuffer(data, dtype=dtype, count=count)
    if fortran:
        return array.reshape(shape[::-1]).transpose().copy()
    return array.reshape(shape).copy()


def read_arrays(path: str | Path, error: type[SystolixError] = ArtifactError,
                limit: int | None = None) -> np.ndarray | dict[str, np.ndarray]:
    """The array of an ``.npy`` file, or the ``{name: array}`` of an ``.npz``, told apart by content.

    ``limit``: most bytes the arrays may take together (default: the memory limit,
    ``systolix.limits.memory_limit()``). Raises ``error`` (``ArtifactError`` by default) for a
    missing or non-regular file, a file that is neither format, a damaged zip, a bad or
    truncated header, an object (pickled) or non-numeric array, or arrays beyond ``limit``.
    """
    from systolix.limits import memory_limit

    path = Path(path)
    limit = memory_limit() if limit is None else int(limit)
    budget = [0]
    with open_regular(path, "file (NumPy .npy/.npz)", error) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(NPY_MAGIC))
        f.seek(0)
        if head.startswith(NPY_MAGIC):
            return _read_array(f, str(path), size, error, budget, limit)
        if not head.startswith(ZIP_MAGIC):
            kind = {".npy": ".npy", ".npz": ".npz"}.get(path.suffix.lower(), ".npy or .npz")
            if not head:
                raise error(f"{path}: empty file, not a NumPy {kind} file")
            raise error(f"{path}: not a NumPy {kind} file")
        try:
            archive = zipfile.ZipFile(f)
            members = archive.infolist()
        except Exception as e:  # BadZipFile, and whatever a damaged central directory raises
            raise error(f"{path}: not a NumPy .npz file (a damaged zip: {clip(str(e) or type(e).__name__, 100)})") from None
        with archive:
            if len(members) > MAX_MEMBERS:
                raise error(f"{path}: holds {len(members):,} files, more than the {MAX_MEMBERS} an .npz may")
            arrays: dict[str, np.ndarray] = {}
            for info in members:
                if info.is_dir():
                    continue
                name = info.filename.removesuffix(".npy")
                where = f"{path}: array {shown(name)}"
                if not info.filename.endswith(".npy"):
                    raise error(f"{path}: {shown(info.filename)} is not a .npy array (an .npz holds only .npy files)")
                if name in arrays:
                    raise error(f"{where} appears twice")
                try:
                    member = archive.open(info)
                except Exception as e:  # encrypted, unsupported compression...
                    raise error(f"{where}: cannot open it in the zip ({clip(str(e) or type(e).__name__, 100)})") from None
                with member:
                    arrays[name] = _read_array(member, where, info.file_size, error, budget, limit)
            return arrays
