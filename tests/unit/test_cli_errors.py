"""Bad input: one clear line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json
import shutil

from systolix.arch import ARCHITECTURES
from tests.cli_helpers import assert_user_error, run_cli
from tests.conftest import RESNET20

BASE = RESNET20 / "baseline"


def test_truncated_program(tmp_path):
    p = tmp_path / "t.tprog"
    p.write_bytes((BASE / "resnet20v2_cifar_onnx_zcu104.tprog").read_bytes()[:100])
    assert_user_error(run_cli("disasm", p, "--arch", "zcu104"), "t.tprog", "not a whole number of 9-byte instructions")


def test_unknown_opcode(tmp_path):
    data = bytearray((BASE / "resnet20v2_cifar_onnx_zcu104.tprog").read_bytes()[:90])
    data[4 * 9 + 8] = 0x90
    p = tmp_path / "u.tprog"
    p.write_bytes(bytes(data))
    assert_user_error(run_cli("disasm", p, "--arch", "zcu104"), "instruction #4 at byte offset 36", "unknown opcode 0x9")


def test_field_out_of_range(tmp_path):
    p = tmp_path / "x.s"
    p.write_text("MatMul local[0] -> acc[4096000] size=0\n")
    out = tmp_path / "x.tprog"
    assert_user_error(run_cli("asm", p, "--arch", "pynqz1", "-o", out), "x.s:1", "acc_address")
    assert not out.exists()


def _tarch(tmp_path, **change):
    d = ARCHITECTURES["zcu104"].to_tarch()
    d.update(change)
    d = {k: v for k, v in d.items() if v is not None}
    p = tmp_path / "a.tarch"
    p.write_text(json.dumps(d))
    return p


def test_tarch_missing_key(tmp_path):
    assert_user_error(run_cli("disasm", BASE / "resnet20v2_cifar_onnx_zcu104.tprog", "--arch", _tarch(tmp_path, local_depth=None)),
                      "a.tarch", "missing key 'local_depth'")


def test_tarch_wrong_type(tmp_path):
    assert_user_error(run_cli("disasm", BASE / "resnet20v2_cifar_onnx_zcu104.tprog", "--arch", _tarch(tmp_path, dram0_depth="big")),
                      "a.tarch", "dram0_depth")


def test_tarch_array_size_1(tmp_path):
    assert_user_error(run_cli("disasm", BASE / "resnet20v2_cifar_onnx_zcu104.tprog", "--arch", _tarch(tmp_path, array_size=1)),
                      "a.tarch", "array_size")


def test_tmodel_names_missing_file(tmp_path):
    shutil.copy(BASE / "resnet20v2_cifar_onnx_zcu104.tmodel", tmp_path / "m.tmodel")
    assert_user_error(run_cli("info", tmp_path / "m.tmodel"), "m.tmodel", "prog.file_name", "does not exist")


def test_tmodel_not_json(tmp_path):
    p = tmp_path / "m.tmodel"
    p.write_text("{nope")
    assert_user_error(run_cli("info", p), "m.tmodel", "not valid JSON")


def test_missing_input_file(tmp_path):
    assert_user_error(run_cli("info", tmp_path / "none.tmodel"), "none.tmodel")
