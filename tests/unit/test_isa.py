"""Instruction layout, encoding and decoding, assembly text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolix.arch import ARCHITECTURES
from systolix.errors import AssemblyError, DecodingError, EncodingError
from systolix.isa import (
    SIMD,
    Configure,
    DataFlow,
    DataMove,
    InstructionLayout,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    SimdOp,
    decode_program,
    encode,
    encode_program,
)
from systolix.isa.assembly import assemble, format_instruction, format_program, parse_program

LAYOUTS = {name: InstructionLayout.of(a) for name, a in ARCHITECTURES.items()}


def instructions(L: InstructionLayout):
    """Every valid instruction of a layout."""
    a0 = st.integers(0, (1 << L.operand0_address_bits) - 1)
    a1 = st.integers(0, (1 << L.operand1_address_bits) - 1)
    s0 = st.integers(0, (1 << L.stride0_bits) - 1).map(lambda k: 1 << k)
    s1 = st.integers(0, (1 << L.stride1_bits) - 1).map(lambda k: 1 << k)
    size = st.integers(0, (1 << L.operand2_bits_used) - 1)
    reg = st.integers(0, (1 << L.simd_operand_bits) - 1)
    return st.one_of(
        st.just(NoOp()),
        st.builds(MatMul, a0, a1, size, s0, s1, st.booleans(), st.booleans()),
        st.builds(DataMove, st.sampled_from(list(DataFlow)), a0, a1, size, s0, s1),
        st.builds(LoadWeights, a0, st.integers(0, (1 << L.operand1_address_bits) - 1), s0, st.booleans()),
        st.builds(SIMD, st.sampled_from(list(SimdOp)), reg, reg, reg, a0, a1, st.booleans(), st.booleans(), st.booleans()),
        st.builds(LoadLUT, a0, a1, s0),
        st.builds(Configure, st.integers(0, 15), st.integers(0, (1 << 32) - 1)),
    )


@pytest.mark.parametrize("name", ["pynqz1", "zcu104", "cmoda7"])
@given(data=st.data())
@settings(max_examples=50, deadline=None)
def test_encode_decode_round_trip(name, data):
    L = LAYOUTS[name]
    prog = data.draw(st.lists(instructions(L), min_size=1, max_size=20))
    raw = encode_program(prog, L)
    assert len(raw) == len(prog) * L.instruction_bytes
    decoded = decode_program(raw, L)
    assert list(decoded) == prog
    assert decoded.to_bytes() == raw  # the decoded columns give the bytes back
    # ... and the assembly text round-trips too.
    assert parse_program(format_program(decoded)) == prog


def test_known_encoding_little_endian_header_on_top():
    L = LAYOUTS["zcu104"]  # op0 24 bits (address 14), op1 24 bits (address 21), op2 16 bits
    raw = encode(MatMul(local_address=5, acc_address=7, size=3, local_stride=2, acc_stride=4, accumulate=True), L)
    value = int.from_bytes(raw, "little")
    assert raw[-1] == 0x11  # opcode 1, flag accumulate
    assert value & 0xFFFFFF == (1 << 14) | 5
    assert (value >> 24) & 0xFFFFFF == (2 << 21) | 7
    assert (value >> 48) & 0xFFFF == 3


def test_configure_packs_register_low_and_value_above():
    L = LAYOUTS["pynqz1"]
    raw = encode(Configure(register=9, value=0x1234), L)
    assert int.from_bytes(raw[:-1], "little") == (0x1234 << 4) | 9
    assert raw[-1] == 0xF0


@pytest.mark.parametrize(
    "instr, field",
    [
        (MatMul(local_address=1 << 14, acc_address=0, size=0), "local_address"),
        (MatMul(local_address=0, acc_address=0, size=1 << 16), "size"),
        (MatMul(local_address=0, acc_address=0, size=0, local_stride=256), "local_stride"),
        (MatMul(local_address=0, acc_address=0, size=0, acc_stride=3), "acc_stride"),
        (DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 1 << 21, 0), "address"),
        (LoadWeights(-1, 0), "local_address"),
        (SIMD(SimdOp.ADD, left=2), "left"),
        (Configure(register=16, value=0), "register"),
    ],
)
def test_field_out_of_range_names_instruction_and_field(instr, field):
    with pytest.raises(EncodingError) as e:
        encode(instr, LAYOUTS["zcu104"])
    assert type(instr).__name__ in str(e.value) and repr(field) in str(e.value)


def test_encode_program_names_the_index():
    with pytest.raises(EncodingError, match="instruction #1"):
        encode_program([NoOp(), MatMul(0, 0, 1 << 20)], LAYOUTS["zcu104"])


def test_decode_errors_name_index_and_offset():
    L = LAYOUTS["zcu104"]
    good = encode_program([NoOp(), NoOp(), NoOp()], L)
    with pytest.raises(DecodingError, match=r"not a whole number of 9-byte instructions"):
        decode_program(good[:-1], L, "p.tprog")
    bad = bytearray(good)
    bad[2 * 9 + 8] = 0x60  # opcode 6
    with pytest.raises(DecodingError, match=r"p.tprog: instruction #2 at byte offset 18: unknown opcode 0x6"):
        decode_program(bytes(bad), L, "p.tprog")
    bad = bytearray(good)
    bad[9 + 8] = 0x2E  # DataMove kind 14
    with pytest.raises(DecodingError, match=r"instruction #1 at byte offset 9: reserved DataMove kind 14"):
        decode_program(bytes(bad), L, "p.tprog")
    bad = bytearray(good)
    bad[8] = 0x27  # DataMove kind 7
    with pytest.raises(DecodingError, match="undefined DataMove kind 7"):
        decode_program(bytes(bad), L)


def test_format_instruction_examples():
    assert format_instruction(MatMul(16, 256, 31, accumulate=True)) == (
        "MatMul      local[16, stride=1] -> acc[256, stride=1] size=31 accumulate"
    )
    assert format_instruction(DataMove(DataFlow.LOCAL_TO_ACC_ACCUMULATE, 3, 9, 0, 1, 2)) == (
        "DataMove    local[3, stride=1] -> acc[9, stride=2] size=0 accumulate"
    )
    assert format_instruction(SIMD(SimdOp.MAX, 0, 1, 1, write_address=6, read_address=5, read=True, write=True)) == (
        "SIMD        Max(input, reg1) -> out+reg1 acc[5] -> acc[6] read write"
    )
    assert format_instruction(Configure(9, 256)) == "Configure   tracepoint=0x100"


@pytest.mark.parametrize(
    "line, message",
    [
        ("Frob", "unknown mnemonic"),
        ("MatMul acc[0] -> local[0] size=1", "MatMul goes local"),
        ("DataMove dram0[0] -> dram1[0] size=1", "one side must be local"),
        ("MatMul local[0] -> acc[0]", "missing field 'size'"),
        ("LoadWeights local[0] size=1 accumulate", "unexpected 'accumulate'"),
        ("SIMD Frob(input, input) -> out acc[0] -> acc[0]", "unknown SIMD operation"),
        ("Configure nosuch=1", "unknown configuration register"),
    ],
)
def test_assembly_errors_name_the_line(line, message):
    with pytest.raises(AssemblyError) as e:
        parse_program("NoOp\n" + line + "\n", "x.s")
    assert "x.s:2" in str(e.value) and message in str(e.value)


def test_assemble_encoding_error_names_the_line():
    with pytest.raises(EncodingError, match=r"x.s:2: MatMul: field 'local_address'"):
        assemble("# header\nMatMul local[99999] -> acc[0] size=0\n", LAYOUTS["pynqz1"], "x.s")
