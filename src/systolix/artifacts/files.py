"""Reading files a user hands us, and the files a ``.tmodel`` names, without surprises.

Every reader here opens only regular files (a FIFO, a device or a directory is refused at once,
never waited on), turns every failure into the caller's ``SystolixError`` subclass with the file's
name, and reads at most what it expects. A file named inside a manifest is a relative name inside
the manifest's folder: absolute paths, ``..`` and symbolic links that lead out of the folder are
refused before anything is opened, and such a refusal never says anything about the file itself
(not its size, not its contents, not whether it exists).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from systolix.errors import ArtifactError, SystolixError

#: A JSON manifest (``.tmodel``, ``.tarch``) larger than this is refused before it is read.
MAX_JSON_BYTES = 64 << 20
#: Longest file name a manifest may use (one path component, as most file systems allow).
MAX_NAME_LENGTH = 255
#: Longest relative path a manifest may use.
MAX_PATH_LENGTH = 1024


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: user data quoted in a message stays short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 120) -> str:
    """The first line of ``text``, cut to ``limit`` characters (a library's message in ours)."""
    lines = str(text).strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str | Path, what: str, error: type[SystolixError] = ArtifactError):
    """``path`` opened for binary reading, if it is a regular file; else ``error`` naming it.

    The file is opened without blocking (a FIFO does not wait for a writer) and checked with
    ``fstat`` on the open descriptor, so nothing is read from anything but a regular file.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except PermissionError:
        raise error(f"{path}: permission denied (cannot read the {what})") from None
    except OSError as e:
        raise error(f"{path}: cannot open the {what}: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _kind(mode)
            raise error(f"{path}: is {kind}; expected the {what}" if kind.startswith("a ") else
                        f"{path}: {kind}; expected the {what}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, what: str, error: type[SystolixError] = ArtifactError, *,
               limit: int | None = None, count: int | None = None) -> bytes:
    """A regular file's bytes (the first ``count`` if given); more than ``limit`` bytes is an error."""
    path = Path(path)
    with open_regular(path, what, error) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if limit is not None and size > limit:
                raise error(f"{path}: the {what} is {size:,} bytes, more than the {limit:,} it may be")
            data = f.read() if count is None else f.read(count)
        except OSError as e:
            raise error(f"{path}: cannot read the {what}: {e.strerror}") from None
    return data


def decode_text(data: bytes, source: str, what: str, error: type[SystolixError] = ArtifactError) -> str:
    """UTF-8 text; anything else is ``error`` naming the first bad byte's offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{source}: the {what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def read_text(path: str | Path, what: str, error: type[SystolixError] = ArtifactError, *, limit: int | None = None) -> str:
    """A regular file as UTF-8 text."""
    return decode_text(read_bytes(path, what, error, limit=limit), str(path), what, error)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, source: str, error: type[SystolixError] = ArtifactError) -> Any:
    """Strict JSON (no NaN or Infinity); malformed or too deeply nested JSON is ``error``."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON: {e.msg} at line {e.lineno}") from None
    except RecursionError:
        raise error(f"{source}: not valid JSON: nested too deeply") from None
    except ValueError as e:  # NaN/Infinity, or an integer with more digits than Python converts
        raise error(f"{source}: not valid JSON: {str(e).splitlines()[0][:100]}") from None


def read_json(path: str | Path, what: str, error: type[SystolixError] = ArtifactError) -> Any:
    """A regular file of UTF-8 JSON, at most ``MAX_JSON_BYTES``."""
    return parse_json(read_text(path, what, error, limit=MAX_JSON_BYTES), str(path), error)


def check_member_name(name: Any) -> str | None:
    """Why ``name`` is not a relative file name inside a folder, or None if it is one."""
    if not isinstance(name, str):
        return "must be a string"
    if not name:
        return "is empty"
    if "\x00" in name:
        return "contains a NUL character"
    if len(name) > MAX_PATH_LENGTH:
        return f"is {len(name):,} characters long, more than {MAX_PATH_LENGTH}"
    if name.startswith(("/", "\\")) or Path(name).is_absolute():
        return "is an absolute path; file names in a manifest are relative to its folder"
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        return "contains '..'; file names in a manifest stay inside its folder"
    if any(len(p) > MAX_NAME_LENGTH for p in parts):
        return f"has a component longer than {MAX_NAME_LENGTH} characters"
    if all(p in ("", ".") for p in parts):
        return "names the folder itself, not a file"
    return None


def member_path(directory: str | Path, name: str, field: str, source: str,
                error: type[SystolixError] = ArtifactError) -> Path:
    """``directory / name`` for a file name a manifest gives in ``field``, confined to ``directory``.

    Refused, without touching the file: a name ``check_member_name`` rejects, and a name that
    resolves (through symbolic links) to somewhere outside ``directory``.
    """
    problem = check_member_name(name)
    if problem:
        raise error(f"{source}: {field} {shown(name)} {problem}")
    directory = Path(directory)
    path = directory / name
    root = os.path.realpath(directory)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or real == root:
        raise error(f"{source}: {field} {shown(name)} leads outside the model's folder (through a symbolic link); refused")
    return path


def read_member(directory: str | Path, name: str, field: str, source: str, what: str,
                error: type[SystolixError] = ArtifactError, *, count: int | None = None,
                limit: int | None = None) -> bytes:
    """The bytes of a file a manifest names (``member_path``), which must be a regular file."""
    path = member_path(directory, name, field, source, error)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{source}: {field} {shown(name)} does not exist in {Path(directory).resolve()}") from None
    except OSError as e:
        raise error(f"{source}: {field} {shown(name)}: cannot open it: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{source}: {field} {shown(name)} is not a regular file; refused")
        if limit is not None and st.st_size > limit:
            raise error(f"{source}: {field} {shown(name)} is {st.st_size:,} bytes, more than the {limit:,} it may be")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        try:
            return f.read() if count is None else f.read(count)
        except OSError as e:
            raise error(f"{source}: {field} {shown(name)}: cannot read it: {e.strerror}") from None


def member_size(directory: str | Path, name: str, field: str, source: str,
                error: type[SystolixError] = ArtifactError) -> int:
    """The size of a regular file a manifest names (``member_path``); refused like ``read_member``."""
    path = member_path(directory, name, field, source, error)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{source}: {field} {shown(name)} does not exist in {Path(directory).resolve()}") from None
    except OSError as e:
        raise error(f"{source}: {field} {shown(name)}: cannot open it: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{source}: {field} {shown(name)} is not a regular file; refused")
    return st.st_size
