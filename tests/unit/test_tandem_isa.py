"""The Tandem unit in the architecture and the ISA: keys, encoding, decoding, assembly text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolix.arch import ARCHITECTURES, Architecture, TandemConfig
from systolix.cli import main
from systolix.errors import ArchitectureError, AssemblyError, DecodingError, EncodingError
from systolix.isa import InstructionLayout, MatMul, NoOp, decode_program, encode, encode_program
from systolix.isa.assembly import assemble, format_program, parse_program
from systolix.isa.tandem import (
    UNARY_ALU,
    ZERO_OPERAND,
    Namespace,
    TAlu,
    TAluOp,
    TCalc,
    TCalcOp,
    TCast,
    TCmp,
    TCmpOp,
    TImm,
    TIterBase,
    TIterStride,
    TLoop,
    TOperand,
    TPermute,
    TPermuteOp,
    TSync,
    TSyncKind,
)

TANDEM = ARCHITECTURES["ultra96v2_tandem"]
# An 8-byte-word architecture with the unit: the fields fit the smallest Tensil word too.
SMALL = ARCHITECTURES["pynqz1"].model_copy(update={"tandem": TandemConfig()})

operand = st.builds(TOperand, st.sampled_from(list(Namespace)), st.integers(0, 31))
dest = st.builds(TOperand, st.sampled_from([Namespace.ACC, Namespace.LOCAL, Namespace.INTERIM]), st.integers(0, 31))
iter_ns = st.sampled_from([Namespace.ACC, Namespace.LOCAL, Namespace.INTERIM])


def _alu(op, d, a, b):
    return TAlu(op, d, a, ZERO_OPERAND if op in UNARY_ALU else b)


tandem_instructions = st.one_of(
    st.builds(TIterBase, iter_ns, st.integers(0, 31), st.integers(0, (1 << 25) - 1)),
    st.builds(TIterStride, iter_ns, st.integers(0, 31), st.integers(0, 7), st.integers(-(1 << 24), (1 << 24) - 1)),
    st.builds(TImm, st.integers(0, 31), st.integers(-(1 << 31), (1 << 31) - 1)),
    st.builds(TLoop, st.integers(0, 7), st.integers(1, 1 << 16), st.integers(1, 256)),
    st.builds(_alu, st.sampled_from(list(TAluOp)), dest, operand, operand),
    st.builds(TCalc, st.sampled_from(list(TCalcOp)), dest, operand),
    st.builds(TCmp, st.sampled_from(list(TCmpOp)), dest, operand, operand),
    st.builds(TPermute, st.sampled_from(list(TPermuteOp)), dest, operand),
    st.builds(TCast, dest, operand, st.integers(1, 64), st.integers(0, 63)),
    st.builds(TSync, st.sampled_from([TSyncKind.TO_UNIT, TSyncKind.TO_ARRAY])),
    st.builds(TSync, st.sampled_from([TSyncKind.RELEASE, TSyncKind.WAIT]), st.integers(0, 3)),
)


@pytest.mark.parametrize("arch", [TANDEM, SMALL], ids=["ultra96v2_tandem", "pynqz1+tandem"])
@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_tandem_programs_round_trip_through_bytes_and_text(arch, data):
    layout = InstructionLayout.of(arch)
    prog = data.draw(st.lists(st.one_of(tandem_instructions, st.just(NoOp()), st.just(MatMul(3, 5, 7))), min_size=1, max_size=12))
    raw = encode_program(prog, layout)
    assert len(raw) == len(prog) * layout.instruction_bytes
    decoded = decode_program(raw, layout)
    assert list(decoded) == prog
    assert decoded.to_bytes() == raw
    text = format_program(decoded)
    assert parse_program(text) == prog
    assert assemble(text, layout) == raw


def test_the_preset_is_ultra96v2_plus_the_unit_and_stock_files_keep_their_keys():
    stock = ARCHITECTURES["ultra96v2"]
    d = TANDEM.to_tarch()
    assert d.pop("tandem") == {"iterators": 32, "immediates": 32, "loop_levels": 8, "interim_depth": 1024, "queue_depth": 16}
    assert d == stock.to_tarch() and "tandem" not in stock.to_json()
    assert Architecture.from_tarch(json.loads(TANDEM.to_json())) == TANDEM
    assert InstructionLayout.of(TANDEM).instruction_bytes == InstructionLayout.of(stock).instruction_bytes


@pytest.mark.parametrize("tandem, fragment", [
    ({"loop_levels": 9}, "tandem.loop_levels"),
    ({"iterators": 0}, "tandem.iterators"),
    ({"lanes": 4}, "unknown key 'tandem.lanes'"),
    ("yes", "field 'tandem'"),
])
def test_bad_tandem_keys_are_named(tandem, fragment):
    with pytest.raises(ArchitectureError, match=fragment.replace(".", r"\.")):
        Architecture.from_tarch(ARCHITECTURES["ultra96v2"].to_tarch() | {"tandem": tandem})


def test_the_unit_needs_a_narrow_fixed_type_and_a_wide_enough_word():
    with pytest.raises(ArchitectureError, match="FP32BP16"):
        Architecture.from_tarch(TANDEM.to_tarch() | {"data_type": "FP32BP16"})
    tiny = {**ARCHITECTURES["cmoda7"].to_tarch(), "local_depth": 16, "accumulator_depth": 16, "dram0_depth": 16,
            "dram1_depth": 16, "stride0_depth": 1, "stride1_depth": 1, "tandem": {}}
    with pytest.raises(ArchitectureError, match="operand bits"):
        Architecture.from_tarch(tiny)


def test_without_the_unit_encoding_decoding_and_assembly_refuse_a_tandem_instruction():
    stock = InstructionLayout.of(ARCHITECTURES["ultra96v2"])
    with pytest.raises(EncodingError, match="TAlu: a Tandem instruction, but the architecture has no Tandem unit"):
        encode(TAlu(TAluOp.ADD, TOperand(Namespace.ACC, 0), TOperand(Namespace.ACC, 1), TOperand(Namespace.IMM, 0)), stock)
    raw = encode_program([NoOp(), TSync(TSyncKind.TO_UNIT)], InstructionLayout.of(TANDEM))
    with pytest.raises(DecodingError, match=r"p\.tprog: instruction #1 at byte offset 9: unknown opcode 0xD: TSync to_unit is a Tandem instruction, "
                                            "but the architecture has no Tandem unit"):
        decode_program(raw, stock, "p.tprog")
    with pytest.raises(EncodingError, match="s.s:2: TLoop: a Tandem instruction"):
        assemble("NoOp\nTLoop level=0 iterations=2 body=1\n", stock, "s.s")


def _word(layout, opcode, func, payload):
    whole = payload | (opcode << 4 | func) << layout.operands_bits
    return whole.to_bytes(layout.instruction_bytes, "little")


@pytest.mark.parametrize("opcode, func, payload, fragment", [
    (0x8, 13, 0, "undefined function 13"),
    (0x8, 0, 4 << 5, "undefined namespace 4"),
    (0x8, 0, 3 << 5, "immediate buffer, which is read-only"),
    (0x8, 0, 1 << 24, "bits set above its fields"),
    (0x8, int(TAluOp.MOVE), 1 << 16, "Move with a second source"),
    (0x6, 0, 3 << 33, "iterators of namespace 3"),
    (0xD, 4, 0, "undefined function 4"),
    (0xD, 0, 1, "bits set above its fields"),
    (0xE, 0, 0, "unknown opcode 0xE (reserved for the Tandem unit)"),
])
def test_undefined_tandem_words_do_not_decode(opcode, func, payload, fragment):
    layout = InstructionLayout.of(TANDEM)
    with pytest.raises(DecodingError, match=r"#0 at byte offset 0: .*" + fragment.replace("(", r"\(").replace(")", r"\)")):
        decode_program(_word(layout, opcode, func, payload), layout)


@pytest.mark.parametrize("line, error, fragment", [
    ("TAlu Add imm.0 <- acc.0, acc.1", EncodingError, "the immediate buffer is read-only"),
    ("TAlu Move acc.0 <- acc.1, acc.2", AssemblyError, "Move takes one source"),
    ("TAlu Add acc.0 <- acc.1", AssemblyError, "Add takes two sources"),
    ("TLoop level=8 iterations=2 body=1", EncodingError, "'level' = 8 does not fit 3 bits"),
    ("TLoop level=0 iterations=65537 body=1", EncodingError, "'iterations' = 65537"),
    ("TIter stride acc.3 level=0 = 16777216", EncodingError, "'value' = 16777216"),
    ("TIter base imm.3 = 4", EncodingError, "iterators belong to acc, local or interim"),
    ("TCalc Foo acc.0 <- acc.1", AssemblyError, "unknown calculus operation 'Foo'"),
    ("TSync sideways", AssemblyError, "unknown sync kind"),
    ("TSync release", AssemblyError, "expected 'TSync release buf=K'"),
    ("TSync wait buf=4", EncodingError, "'buf' = 4 does not fit 2 bits"),
    ("TAlu Add vreg.0 <- acc.0, acc.1", AssemblyError, "unknown namespace 'vreg'"),
])
def test_bad_tandem_lines_are_named(line, error, fragment):
    with pytest.raises(error, match=fragment):
        assemble(line, InstructionLayout.of(TANDEM))


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run the CLI in this process as the script does: exit status, stdout, stderr."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_cli_asm_and_disasm_round_trip_a_tandem_program_and_refuse_it_without_the_unit(tmp_path, capsys):
    listing = (
        "TIter base acc.0 = 16\nTIter stride acc.0 level=1 = 2\nTImm imm.0 = -65536\n"
        "TLoop level=1 iterations=8 body=2\nTAlu Mac interim.0 <- acc.0, imm.0\nTPermute LaneMax acc.0 <- interim.0\n"
        "TSync release buf=3\nTSync to_array\nMatMul local[0, stride=1] -> acc[0, stride=1] size=3\n"
    )
    (tmp_path / "p.s").write_text(listing)
    code, _, err = cli(capsys, "asm", tmp_path / "p.s", "--arch", "ultra96v2_tandem", "-o", tmp_path / "p.tprog")
    assert code == 0, err
    raw = (tmp_path / "p.tprog").read_bytes()
    assert len(raw) == 9 * 9
    code, out, err = cli(capsys, "disasm", tmp_path / "p.tprog", "--arch", "ultra96v2_tandem")
    assert code == 0, err
    (tmp_path / "q.s").write_text(out)
    code, _, _ = cli(capsys, "asm", tmp_path / "q.s", "--arch", "ultra96v2_tandem", "-o", tmp_path / "q.tprog")
    assert code == 0 and (tmp_path / "q.tprog").read_bytes() == raw
    code, _, err = cli(capsys, "disasm", tmp_path / "p.tprog", "--arch", "ultra96v2")
    assert code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1
    assert "instruction #0 at byte offset 0: unknown opcode 0x6: TIter base acc.0 = 16 is a Tandem instruction" in err
    assert "no Tandem unit" in err
    code, _, err = cli(capsys, "asm", tmp_path / "p.s", "--arch", "ultra96v2", "-o", tmp_path / "r.tprog")
    assert code == 2 and "p.s:1: TConfig: a Tandem instruction" in err and not (tmp_path / "r.tprog").exists()


def test_the_backend_encodes_tandem_instructions_among_lir_ones():
    from systolix.backend.encoder import encode_lir

    layout = InstructionLayout.of(TANDEM)
    prog = [TSync(TSyncKind.TO_UNIT), TLoop(0, 4, 1), TAlu(TAluOp.ADD, TOperand(Namespace.ACC, 0), TOperand(Namespace.ACC, 1),
                                                        TOperand(Namespace.IMM, 2))]
    assert encode_lir(prog, layout) == encode_program(prog, layout)
    with pytest.raises(EncodingError, match="no Tandem unit"):
        encode_lir(prog, InstructionLayout.of(ARCHITECTURES["ultra96v2"]))


PAYLOADS = st.one_of(*(st.integers(0, (1 << bits) - 1) for bits in (2, 16, 24, 28, 36, 37, 64)))


@given(words=st.lists(st.tuples(st.integers(0x6, 0xE), st.integers(0, 15), PAYLOADS), min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_any_tandem_word_either_decodes_to_an_instruction_that_encodes_back_or_is_a_decoding_error(words):
    layout = InstructionLayout.of(TANDEM)
    raw = b"".join(_word(layout, op, func, payload) for op, func, payload in words)
    try:
        decoded = decode_program(raw, layout)
    except DecodingError as e:
        assert "instruction #" in str(e)
        return
    assert encode_program(list(decoded), layout) == raw
