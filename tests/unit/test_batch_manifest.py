"""The ``.tmodel`` of a batch program (``systolix.batch``): checked like every other field."""

from __future__ import annotations

import json

import pytest

import systolix
from systolix.errors import ArtifactError
from systolix.models import build


@pytest.fixture(scope="module")
def batch_2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("b2")
    path = systolix.compile(build("digits_cnn"), "pynqz1", batch=2).save(folder)
    return path, json.loads(path.read_text())


def _with(path, manifest, tmp_path):
    """The manifest rewritten beside its program and constants."""
    for f in path.parent.iterdir():
        if f.suffix != ".tmodel":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    out = tmp_path / path.name
    out.write_text(json.dumps(manifest))
    return out


def test_the_manifest_records_the_batch_and_spans_of_two_images(batch_2):
    path, manifest = batch_2
    assert manifest["systolix"]["batch"] == 2
    model = systolix.load(path)
    assert model.program_batch == 2
    (span,) = manifest["inputs"]
    entry = manifest["systolix"]["inputs"][0]
    # One image of [1, 1, 8, 8], packed by row windows (4 pixels of a row a vector: 6 of 8 lanes,
    # ``systolix.hir_passes.pack_inputs``), is 8 x 2 vectors; two images, 32.
    assert entry["shape"] == [1, 1, 8, 8] and entry["pack"]["grid"] == [8, 2] and span["size"] == 2 * 16


@pytest.mark.parametrize("bad", [0, -2, 1025, "2", 2.0, None])
def test_a_bad_batch_is_an_error_naming_the_field(batch_2, tmp_path, bad):
    path, manifest = batch_2
    changed = json.loads(json.dumps(manifest))
    changed["systolix"]["batch"] = bad
    with pytest.raises(ArtifactError, match="systolix.batch"):
        systolix.load(_with(path, changed, tmp_path))


def test_spans_that_do_not_hold_the_batch_are_an_error(batch_2, tmp_path):
    path, manifest = batch_2
    changed = json.loads(json.dumps(manifest))
    changed["systolix"]["batch"] = 3
    with pytest.raises(ArtifactError, match="batch of 3.*DRAM0 span has 32"):
        systolix.load(_with(path, changed, tmp_path))
