"""Reading and writing .tmodel manifests, .tdata constants and CSV vectors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from systolix.artifacts import TModel, read_tdata, read_vectors_csv, write_tdata, write_vectors_csv
from systolix.errors import ArtifactError
from systolix.numerics import DataType
from tests.conftest import RESNET20, SPEECH


def test_tensil_manifests_load_with_all_keys():
    m = TModel.load(RESNET20 / "ultra_ram_local_consts" / "resnet20v2_cifar_onnx_zcu104_uram.tmodel")
    assert m.load_consts_to_local is True
    assert m.arch.local_depth == 49152 and m.consts[0].size == 18803
    assert m.inputs[0].name == "x:0" and m.outputs[0].base == 8
    # The speech manifest predates load_consts_to_local: absent means false.
    speech = TModel.load(SPEECH / "speech_commands_onnx_speech_robot.tmodel")
    assert "load_consts_to_local" not in json.loads((SPEECH / "speech_commands_onnx_speech_robot.tmodel").read_text())
    assert speech.load_consts_to_local is False


def test_manifest_round_trip_keeps_tensil_keys_and_extensions(tmp_path):
    src = RESNET20 / "baseline"
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    original = json.loads((src / "resnet20v2_cifar_onnx_zcu104.tmodel").read_text())
    m = TModel.load(tmp_path / "resnet20v2_cifar_onnx_zcu104.tmodel")
    m.systolix = {"version": 1, "layers": []}
    m.save(tmp_path / "again.tmodel")
    written = json.loads((tmp_path / "again.tmodel").read_text())
    # Every Tensil key is written exactly as Tensil wrote it; ours is one extra key.
    assert {k: written[k] for k in original} == original
    assert set(written) - set(original) == {"systolix"}
    assert TModel.load(tmp_path / "again.tmodel").systolix == {"version": 1, "layers": []}


def test_short_tdata_is_an_error(tmp_path):
    src = RESNET20 / "baseline"
    shutil.copy(src / "resnet20v2_cifar_onnx_zcu104.tmodel", tmp_path)
    shutil.copy(src / "resnet20v2_cifar_onnx_zcu104.tprog", tmp_path)
    (tmp_path / "resnet20v2_cifar_onnx_zcu104.tdata").write_bytes((src / "resnet20v2_cifar_onnx_zcu104.tdata").read_bytes()[:1000])
    with pytest.raises(ArtifactError, match=r"consts\[0\] says 18803 vectors .* has only 1000 bytes"):
        TModel.load(tmp_path / "resnet20v2_cifar_onnx_zcu104.tmodel")


def test_bad_manifest_field(tmp_path):
    d = json.loads((RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tmodel").read_text())
    d["inputs"][0]["base"] = "zero"
    p = tmp_path / "m.tmodel"
    p.write_text(json.dumps(d))
    with pytest.raises(ArtifactError, match=r"m.tmodel: field 'inputs.0.base'"):
        TModel.load(p, check_files=False)


def test_tdata_reads_tensil_constants():
    raw = read_tdata(RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tdata", DataType.FP16BP8, 32)
    assert raw.shape == (18803, 32)
    assert raw.min() >= -32768 and raw.max() <= 32767


def test_tdata_write_read(tmp_path):
    raw = np.arange(-8, 8).reshape(2, 8)
    write_tdata(tmp_path / "c.tdata", raw, DataType.FP18BP10)
    assert np.array_equal(read_tdata(tmp_path / "c.tdata", DataType.FP18BP10, 8), raw)


def test_csv_vectors(tmp_path):
    v = read_vectors_csv(RESNET20 / "cifar_10x32.csv", 32)
    assert v.shape == (10240, 32)
    write_vectors_csv(tmp_path / "v.csv", v[:3])
    assert np.array_equal(read_vectors_csv(tmp_path / "v.csv", 32), v[:3])
    with pytest.raises(ArtifactError, match="array size is 8"):
        read_vectors_csv(RESNET20 / "cifar_10x32.csv", 8)
