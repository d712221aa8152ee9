"""Assembly text for Tensor Compute Unit programs: one instruction a line.

The syntax, one line per instruction (``#`` starts a comment; numbers are decimal or ``0x`` hex;
``size`` is the encoded size, one less than the number of vectors, as in Tensil)::

    NoOp
    MatMul local[16, stride=1] -> acc[256, stride=1] size=31 accumulate zeroes
    DataMove dram0[1024, stride=1] -> local[0, stride=1] size=63
    DataMove local[0, stride=1] -> acc[12, stride=1] size=3 accumulate
    LoadWeights local[100, stride=1] size=32 zeroes
    SIMD Max(input, reg1) -> out+reg1 acc[5] -> acc[6] read write accumulate
    LoadLUT local[0, stride=1] table=1
    Configure tracepoint=0x100

On an architecture with the Tandem unit, its instructions (``systolix.isa.tandem``, ``docs/tandem.md``)::

    TIter      base acc.0 = 128
    TIter      stride acc.0 level=0 = 1
    TImm       imm.3 = 65536
    TLoop      level=0 iterations=16 body=2
    TAlu       Mac interim.0 <- acc.0, imm.3
    TCmp       Gt local.1 <- acc.0, imm.0
    TCalc      Abs acc.0 <- acc.0
    TPermute   LaneMax interim.1 <- acc.0
    TCast      interim.2 <- interim.0 width=16 frac=8
    TSync      to_unit

DataMove's direction and memories name its data-flow kind; ``accumulate`` on a move into the
accumulators is kind 15. SIMD sources are ``input`` or ``regK``; the destination is ``out`` or
``out+regK``; ``acc[R] -> acc[W]`` are the read and write addresses.
"""

from __future__ import annotations

import re
from typing import Iterable

from systolix.errors import AssemblyError
from systolix.isa import tandem
from systolix.isa.instructions import (
    CONFIG_REGISTER_NAMES,
    SIMD,
    SIMD_OP_NAMES,
    Configure,
    DataFlow,
    DataMove,
    Instruction,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    SimdOp,
)

# Each data flow's source and destination, as the assembly text names them (the CLI reads it too).
FLOW_ENDS = {
    DataFlow.DRAM0_TO_LOCAL: ("dram0", "local"),
    DataFlow.LOCAL_TO_DRAM0: ("local", "dram0"),
    DataFlow.DRAM1_TO_LOCAL: ("dram1", "local"),
    DataFlow.LOCAL_TO_DRAM1: ("local", "dram1"),
    DataFlow.ACC_TO_LOCAL: ("acc", "local"),
    DataFlow.LOCAL_TO_ACC: ("local", "acc"),
    DataFlow.LOCAL_TO_ACC_ACCUMULATE: ("local", "acc"),
}
_REGISTER_BY_NAME = {name: int(reg) for reg, name in CONFIG_REGISTER_NAMES.items()}
_SIMD_OP_BY_NAME = {name.lower(): op for op, name in SIMD_OP_NAMES.items()}
_MNEMONIC_WIDTH = 11


def _mem(name: str, address: int, stride: int) -> str:
    return f"{name}[{address}, stride={stride}]"


def _source(k: int) -> str:
    return "input" if k == 0 else f"reg{k}"


def _dest(k: int) -> str:
    return "out" if k == 0 else f"out+reg{k}"


def format_instruction(instr: Instruction) -> str:
    """One instruction as assembly text (no index comment)."""
    def line(mnemonic: str, rest: str) -> str:
        return f"{mnemonic:<{_MNEMONIC_WIDTH}} {rest}".rstrip()

    if isinstance(instr, NoOp):
        return "NoOp"
    if isinstance(instr, tandem.TANDEM_TYPES):
        return tandem.format_tandem(instr, line)
    if isinstance(instr, MatMul):
        flags = " ".join(f for f, on in (("accumulate", instr.accumulate), ("zeroes", instr.zeroes)) if on)
        return line("MatMul", f"{_mem('local', instr.local_address, instr.local_stride)} -> "
                    f"{_mem('acc', instr.acc_address, instr.acc_stride)} size={instr.size} {flags}")
    if isinstance(instr, DataMove):
        src, dst = FLOW_ENDS[DataFlow(instr.flow)]
        far = (instr.address, instr.stride)
        near = (instr.local_address, instr.local_stride)
        a = _mem(src, *(near if src == "local" else far))
        b = _mem(dst, *(near if dst == "local" else far))
        flag = " accumulate" if instr.flow == DataFlow.LOCAL_TO_ACC_ACCUMULATE else ""
        return line("DataMove", f"{a} -> {b} size={instr.size}{flag}")
    if isinstance(instr, LoadWeights):
        return line("LoadWeights", f"{_mem('local', instr.local_address, instr.local_stride)} size={instr.size}"
                    + (" zeroes" if instr.zeroes else ""))
    if isinstance(instr, SIMD):
        flags = " ".join(f for f, on in (("read", instr.read), ("write", instr.write), ("accumulate", instr.accumulate)) if on)
        op = SIMD_OP_NAMES[SimdOp(instr.op)]
        return line("SIMD", f"{op}({_source(instr.left)}, {_source(instr.right)}) -> {_dest(instr.dest)} "
                    f"acc[{instr.read_address}] -> acc[{instr.write_address}] {flags}")
    if isinstance(instr, LoadLUT):
        return line("LoadLUT", f"{_mem('local', instr.local_address, instr.local_stride)} table={instr.table}")
    if isinstance(instr, Configure):
        try:
            from systolix.isa.instructions import ConfigRegister

            name = CONFIG_REGISTER_NAMES[ConfigRegister(instr.register)]
        except ValueError:
            name = f"r{instr.register}"
        return line("Configure", f"{name}=0x{instr.value:X}")
    raise AssemblyError(f"not an instruction: {instr!r}")


def format_program(instructions: Iterable[Instruction], header: str | None = None) -> str:
    """A whole listing, each line ending with its instruction index as a comment."""
    lines = []
    if header:
        lines += [f"# {h}" if h else "#" for h in header.splitlines()]
    for i, instr in enumerate(instructions):
        lines.append(f"{format_instruction(instr):<72} # {i}")
    return "\n".join(lines) + "\n"


# --- parsing ---------------------------------------------------------------------------
_NUM = r"(?:0[xX][0-9a-fA-F]+|\d+)"
_MEM_RE = re.compile(rf"^(local|acc|dram0|dram1)\[\s*({_NUM})\s*(?:,\s*stride\s*=\s*({_NUM})\s*)?\]$", re.I)
_SIMD_RE = re.compile(
    rf"^(\w+)\(\s*(input|reg\d+)\s*,\s*(input|reg\d+)\s*\)\s*->\s*(out(?:\+reg\d+)?)\s+"
    rf"acc\[\s*({_NUM})\s*\]\s*->\s*acc\[\s*({_NUM})\s*\]((?:\s+\w+)*)$",
    re.I,
)


def _int(text: str) -> int:
    return int(text, 0)


def _parse_mem(token: str, where: str) -> tuple[str, int, int]:
    m = _MEM_RE.match(token.strip())
    if not m:
        raise AssemblyError(f"{where}: expected a memory reference like local[16, stride=1], got {token.strip()!r}")
    return m.group(1).lower(), _int(m.group(2)), _int(m.group(3)) if m.group(3) else 1


def _split_kv_flags(tokens: list[str], where: str, keys: set[str], flags: set[str]) -> tuple[dict[str, int], set[str]]:
    values: dict[str, int] = {}
    seen: set[str] = set()
    for t in tokens:
        if "=" in t:
            k, _, v = t.partition("=")
            k = k.lower()
            if k not in keys:
                raise AssemblyError(f"{where}: unknown field {k!r} (expected {', '.join(sorted(keys))})")
            try:
                values[k] = _int(v)
            except ValueError:
                raise AssemblyError(f"{where}: field {k!r} is not a number: {v!r}") from None
        elif t.lower() in flags:
            seen.add(t.lower())
        else:
            raise AssemblyError(f"{where}: unexpected {t!r} (flags here: {', '.join(sorted(flags)) or 'none'})")
    missing = keys - set(values)
    if missing:
        raise AssemblyError(f"{where}: missing field {sorted(missing)[0]!r}")
    return values, seen


def _mem_and_rest(body: str, where: str, n_mems: int) -> tuple[list[tuple[str, int, int]], list[str]]:
    """Split ``a[...] -> b[...] rest`` into memory references and the remaining tokens."""
    mems = []
    rest = body
    for k in range(n_mems):
        m = re.match(r"\s*(\w+\[[^\]]*\])\s*", rest)
        if not m:
            raise AssemblyError(f"{where}: expected a memory reference, got {rest.strip()!r}")
        mems.append(_parse_mem(m.group(1), where))
        rest = rest[m.end():]
        if k < n_mems - 1:
            if not rest.startswith("->"):
                raise AssemblyError(f"{where}: expected '->' between memory references")
            rest = rest[2:]
    return mems, rest.split()


def parse_instruction(text: str, where: str = "line") -> Instruction:
    """Parse one instruction (without comment)."""
    text = text.strip()
    mnemonic, _, body = text.partition(" ")
    key = mnemonic.lower()
    body = body.strip()
    try:
        if key in tandem.MNEMONICS:
            return tandem.parse_tandem(key, body)
        if key == "noop":
            if body:
                raise AssemblyError(f"{where}: NoOp takes no operands")
            return NoOp()
        if key == "matmul":
            (src, dst), rest = _mem_and_rest(body, where, 2)
            if src[0] != "local" or dst[0] != "acc":
                raise AssemblyError(f"{where}: MatMul goes local[...] -> acc[...]")
            values, flags = _split_kv_flags(rest, where, {"size"}, {"accumulate", "zeroes"})
            return MatMul(src[1], dst[1], values["size"], src[2], dst[2], "accumulate" in flags, "zeroes" in flags)
        if key == "datamove":
            (src, dst), rest = _mem_and_rest(body, where, 2)
            values, flags = _split_kv_flags(rest, where, {"size"}, {"accumulate"})
            pair = (src[0], dst[0])
            matches = [f for f, ends in FLOW_ENDS.items() if ends == pair]
            if not matches:
                raise AssemblyError(f"{where}: DataMove cannot go {src[0]} -> {dst[0]} (one side must be local)")
            flow = matches[0]
            if "accumulate" in flags:
                if pair != ("local", "acc"):
                    raise AssemblyError(f"{where}: 'accumulate' applies only to DataMove local -> acc")
                flow = DataFlow.LOCAL_TO_ACC_ACCUMULATE
            local, far = (src, dst) if src[0] == "local" else (dst, src)
            return DataMove(flow, local[1], far[1], values["size"], local[2], far[2])
        if key == "loadweights":
            (src,), rest = _mem_and_rest(body, where, 1)
            if src[0] != "local":
                raise AssemblyError(f"{where}: LoadWeights reads local[...]")
            values, flags = _split_kv_flags(rest, where, {"size"}, {"zeroes"})
            return LoadWeights(src[1], values["size"], src[2], "zeroes" in flags)
        if key == "loadlut":
            (src,), rest = _mem_and_rest(body, where, 1)
            values, _ = _split_kv_flags(rest, where, {"table"}, set())
            return LoadLUT(src[1], values["table"], src[2])
        if key == "simd":
            m = _SIMD_RE.match(body)
            if not m:
                raise AssemblyError(
                    f"{where}: expected 'SIMD Op(left, right) -> dest acc[R] -> acc[W] [read] [write] [accumulate]'"
                )
            op = _SIMD_OP_BY_NAME.get(m.group(1).lower())
            if op is None:
                raise AssemblyError(f"{where}: unknown SIMD operation {m.group(1)!r}")

            def reg(tok: str) -> int:
                tok = tok.lower()
                return 0 if tok in ("input", "out") else int(tok.split("reg")[1])

            _, flags = _split_kv_flags(m.group(7).split(), where, set(), {"read", "write", "accumulate"})
            return SIMD(op, reg(m.group(2)), reg(m.group(3)), reg(m.group(4)), _int(m.group(6)), _int(m.group(5)),
                        "read" in flags, "write" in flags, "accumulate" in flags)
        if key == "configure":
            name, eq, value = body.partition("=")
            name = name.strip().lower()
            if not eq:
                raise AssemblyError(f"{where}: expected 'Configure register=value'")
            if name in _REGISTER_BY_NAME:
                register = _REGISTER_BY_NAME[name]
            elif re.fullmatch(r"r\d+", name):
                register = int(name[1:])
            else:
                raise AssemblyError(f"{where}: unknown configuration register {name!r}")
            return Configure(register, _int(value.strip()))
    except ValueError as e:
        raise AssemblyError(f"{where}: {e}") from None
    raise AssemblyError(f"{where}: unknown mnemonic {mnemonic!r}")


def parse_program(text: str, source: str = "listing") -> list[Instruction]:
    """Parse a listing; errors name the source and line number."""
    return [instr for _, instr in parse_program_lines(text, source)]


def parse_program_lines(text: str, source: str = "listing") -> list[tuple[int, Instruction]]:
    """Parse a listing into ``(line number, instruction)`` pairs."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        code = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if code:
            out.append((lineno, parse_instruction(code, f"{source}:{lineno}")))
    return out


def assemble(text: str, layout, source: str = "listing") -> bytes:
    """Assemble a listing to program bytes. Raises ``AssemblyError`` (a line that does not
    parse) or ``EncodingError`` (a field that does not fit the layout), naming the listing line."""
    from systolix.errors import EncodingError
    from systolix.isa.codec import encode

    out = bytearray()
    for lineno, instr in parse_program_lines(text, source):
        try:
            out += encode(instr, layout)
        except EncodingError as e:
            raise EncodingError(f"{source}:{lineno}: {e}") from None
    return bytes(out)
