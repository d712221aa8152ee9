"""The Tensor Compute Unit's instruction set: layout, instructions, binary codec, assembly."""

from systolix.isa.codec import DecodedProgram, decode_program, encode, encode_fields, encode_program
from systolix.isa.instructions import (
    CONFIG_REGISTER_NAMES,
    OPCODE_NAMES,
    SIMD,
    SIMD_OP_NAMES,
    ConfigRegister,
    Configure,
    DataFlow,
    DataMove,
    Instruction,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    Opcode,
    SimdOp,
)
from systolix.isa.layout import InstructionLayout, log2ceil

__all__ = [
    "CONFIG_REGISTER_NAMES", "OPCODE_NAMES", "SIMD", "SIMD_OP_NAMES", "ConfigRegister", "Configure",
    "DataFlow", "DataMove", "DecodedProgram", "Instruction", "InstructionLayout", "LoadLUT",
    "LoadWeights", "MatMul", "NoOp", "Opcode", "SimdOp", "decode_program", "encode", "encode_fields",
    "encode_program", "log2ceil",
]
