"""The commands the decoder queues for the two execution lanes, as Amaranth struct layouts.

An instruction becomes one command: the compute lane takes MatMul, LoadWeights, SIMD and the
DataMoves between local memory and the accumulators; the DRAM lane takes the DataMoves between
local memory and DRAM0/DRAM1. Each command carries the local-memory locks its instruction
took (``RtlConfig.lock_bits``: bit 2r reads region r, bit 2r+1 writes it), which the lane gives
back when the instruction is done with local memory.
"""

from __future__ import annotations

from enum import IntEnum

from amaranth.lib import data

from systolix.isa import log2ceil
from systolix.rtl.config import RtlConfig

class ComputeKind(IntEnum):
    MATMUL = 0
    LOAD_WEIGHTS = 1
    SIMD = 2
    ACC_TO_LOCAL = 3
    LOCAL_TO_ACC = 4


def local_bits(cfg: RtlConfig) -> int:
    return max(1, log2ceil(cfg.arch.local_depth))


def acc_bits(cfg: RtlConfig) -> int:
    return max(1, log2ceil(cfg.arch.accumulator_depth))


def register_bits(cfg: RtlConfig) -> int:
    return max(1, cfg.layout.simd_operand_bits)


def compute_command(cfg: RtlConfig) -> data.StructLayout:
    L = cfg.layout
    return data.StructLayout({
        "kind": 3,
        "local_addr": local_bits(cfg),
        "local_stride": max(1, L.stride0_bits),
        "acc_addr": acc_bits(cfg),  # SIMD: the write address
        "acc_stride": max(1, L.stride1_bits),
        "read_addr": acc_bits(cfg),  # SIMD only
        "count_m1": L.size_bits,
        "accumulate": 1,
        "zeroes": 1,
        "read": 1,
        "write": 1,
        "op": 4,
        "left": register_bits(cfg),
        "right": register_bits(cfg),
        "dest": register_bits(cfg),
        "lock": cfg.lock_bits,
    })


def dram_command(cfg: RtlConfig) -> data.StructLayout:
    L = cfg.layout
    return data.StructLayout({
        "to_local": 1,
        "dram": 1,
        "local_addr": local_bits(cfg),
        "local_stride": max(1, L.stride0_bits),
        "dram_addr": cfg.axi_addr_bits,  # bytes, the DRAM offset register included
        "dram_stride": max(1, L.stride1_bits),  # log2 of the stride in vectors
        "count_m1": L.size_bits,
        "cache": 4,
        "lock": cfg.lock_bits,
    })
