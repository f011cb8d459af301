import json
from pathlib import Path

import pytest

from trainspec.schema import skus

CATALOG = Path(skus.__file__).with_name("skus.json")


def _raw():
    return json.loads(CATALOG.read_text(encoding="utf-8"))


# --- lookup ---------------------------------------------------------------------------------

def test_lookup_exact():
    sku = skus.lookup("Standard_NC24rs_v3")
    assert sku is not None
    assert sku.name == "Standard_NC24rs_v3"
    assert (sku.gpus, sku.gpu, sku.family) == (4, "V100", "NCv3")


@pytest.mark.parametrize("spelling", ["standard_nc24rs_v3", "STANDARD_NC24RS_V3", "  Standard_NC24rs_v3 "])
def test_lookup_case_insensitive(spelling):
    assert skus.lookup(spelling).name == "Standard_NC24rs_v3"


@pytest.mark.parametrize("spelling", ["NC24rs_v3", "nc24rs_v3", "ND96isr_H100_v5"])
def test_a_name_without_standard_is_no_size_but_a_near_miss_of_one(spelling):
    """Azure spells every size Standard_...: one without it is not quietly spelt anew (docs/skus.md),
    validate says what was meant (tests/test_sku_catalog.py)."""
    assert skus.lookup(spelling) is None and skus.Catalog().lookup(spelling) is None
    canonical = {"nc24rs_v3": "Standard_NC24rs_v3", "nd96isr_h100_v5": "Standard_ND96isr_H100_v5"}[spelling.lower()]
    assert skus.near_miss(spelling, [s.name for s in skus.all_skus()]) == [canonical]


@pytest.mark.parametrize("name", ["Standard_NC24r_v3", "Standard_Bogus_v9", "", "Standard_", None])
def test_unknown_is_none(name):
    assert skus.lookup(name) is None


def test_closest_suggests_the_rdma_size():
    assert "Standard_NC24rs_v3" in skus.closest("Standard_NC24r_v3")
    assert "Standard_NC24rs_v3" in skus.closest("nc24r_v3")
    assert len(skus.closest("Standard_NC24r_v3", n=1)) == 1
    assert skus.closest("Standard_NC24r_v3", n=0) == []
    assert all(skus.lookup(n) is not None for n in skus.closest("Standard_ND96asr_v5"))


def test_all_skus_and_source():
    names = [s.name for s in skus.all_skus()]
    assert names == sorted(_raw()["skus"])
    assert len(names) == len(set(names))
    src = skus.catalog_source()
    assert "2026-11-22" in src and "https://learn.microsoft.com/" in src and "\n" not in src


# --- the data file --------------------------------------------------------------------------

def test_json_is_sorted_and_canonically_formatted():
    text = CATALOG.read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_every_entry_has_the_documented_shape():
    required = {"gpus", "gpu", "gpu_memory_gb", "vcpus", "memory_gb", "infiniband", "family", "source", "retired"}
    for name, e in _raw()["skus"].items():
        assert name.startswith("Standard_"), name
        assert required <= set(e) <= required | {"note"}, name
        assert e["source"].startswith("https://learn.microsoft.com/"), name
        assert e["source"] in skus.catalog_source(), name
        if "note" in e:
            assert isinstance(e["note"], str) and e["note"].strip(), name


@pytest.mark.parametrize("sku", skus.all_skus(), ids=lambda s: s.name)
def test_numbers_are_sane(sku):
    assert isinstance(sku.gpus, int) and sku.gpus >= 0
    assert sku.vcpus >= 1
    assert sku.memory_gb > 0
    assert isinstance(sku.infiniband, bool)
    assert sku.family
    assert (sku.gpu is None) == (sku.gpus == 0)
    assert (sku.gpu_memory_gb == 0) == (sku.gpus == 0)
    # Azure marks sizes with an InfiniBand back-end with an "r" in the additive-feature letters.
    suffix = sku.name.split("_")[1].lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ").lstrip("0123456789-")
    assert sku.infiniband == ("r" in suffix), sku.name


# --- spot checks of facts verified against Microsoft Learn ----------------------------------

def test_nd96asr_v4_is_8_a100_with_infiniband():
    sku = skus.lookup("Standard_ND96asr_v4")
    assert (sku.gpus, sku.gpu, sku.gpu_memory_gb, sku.infiniband) == (8, "A100", 40, True)
    assert (sku.vcpus, sku.memory_gb) == (96, 900)


def test_nc24s_v3_has_no_infiniband_but_nc24rs_v3_does():
    plain, rdma = skus.lookup("Standard_NC24s_v3"), skus.lookup("Standard_NC24rs_v3")
    assert not plain.infiniband and rdma.infiniband
    assert (plain.gpus, plain.vcpus, plain.memory_gb) == (rdma.gpus, rdma.vcpus, rdma.memory_gb) == (4, 24, 448)


@pytest.mark.parametrize("name, gpus, gpu, gpu_memory_gb, vcpus, memory_gb, infiniband", [
    ("Standard_NC6s_v3", 1, "V100", 16, 6, 112, False),
    ("Standard_ND40rs_v2", 8, "V100", 32, 40, 672, True),
    ("Standard_NC64as_T4_v3", 4, "T4", 16, 64, 440, False),
    ("Standard_NC96ads_A100_v4", 4, "A100", 80, 96, 880, False),
    ("Standard_ND96amsr_A100_v4", 8, "A100", 80, 96, 1900, True),
    ("Standard_NC80adis_H100_v5", 2, "H100 NVL", 94, 80, 640, False),
    ("Standard_ND96isr_H100_v5", 8, "H100", 80, 96, 1900, True),
    ("Standard_ND96isr_H200_v5", 8, "H200", 141, 96, 1850, True),
    ("Standard_ND96isr_MI300X_v5", 8, "MI300X", 192, 96, 1850, True),
    ("Standard_NV36ads_A10_v5", 1, "A10", 24, 36, 440, False),
    ("Standard_DS3_v2", 0, None, 0, 4, 14, False),
    ("Standard_HB120rs_v3", 0, None, 0, 120, 448, True),
    ("Standard_HC44rs", 0, None, 0, 44, 352, True),
])
def test_spot_checks(name, gpus, gpu, gpu_memory_gb, vcpus, memory_gb, infiniband):
    sku = skus.lookup(name)
    assert (sku.gpus, sku.gpu, sku.gpu_memory_gb, sku.vcpus, sku.memory_gb, sku.infiniband) == \
        (gpus, gpu, gpu_memory_gb, vcpus, memory_gb, infiniband)


def test_retired_ncv3_is_flagged():
    for name in ("Standard_NC6s_v3", "Standard_NC12s_v3", "Standard_NC24s_v3", "Standard_NC24rs_v3"):
        assert "retired" in skus.lookup(name).note


def test_fractional_gpu_sizes_are_not_listed():
    for name in ("Standard_NV6ads_A10_v5", "Standard_NV12ads_A10_v5", "Standard_NV18ads_A10_v5"):
        assert skus.lookup(name) is None


def test_retired_sizes_carry_their_date():
    assert skus.lookup("Standard_NC24rs_v3").retired == "2025-09-30"
    assert skus.lookup("Standard_ND96isr_H100_v5").retired is None


# --- issue 21: H100 NVL under --gpu H100; a size one edit from a known one is named ------------------

def test_the_h100_nvl_sizes_are_in_the_catalog_and_listed_under_h100():
    from conftest import ts

    for name, gpus in (("Standard_NC40ads_H100_v5", 1), ("Standard_NC80adis_H100_v5", 2)):
        sku = skus.lookup(name)
        assert (sku.gpus, sku.gpu, sku.gpu_memory_gb, sku.infiniband) == (gpus, "H100 NVL", 94, False)
    proc = ts("skus", "--gpu", "H100", "--format", "json")
    listed = {row["name"] for row in json.loads(proc.stdout)["skus"]}
    assert {"Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5", "Standard_ND96isr_H100_v5"} <= listed
    assert not any("H200" in name for name in listed)
    nvl = ts("skus", "--gpu", "h100 nvl", "--format", "json")
    assert {row["name"] for row in json.loads(nvl.stdout)["skus"]} == {"Standard_NC40ads_H100_v5",
                                                                      "Standard_NC80adis_H100_v5"}


@pytest.mark.parametrize("gpu, wanted, matches", [
    ("H100 NVL", "H100", True), ("H100", "h100", True), ("H100 NVL", "H100 NVL", True), ("H100", "H100 NVL", False),
    ("H200", "H100", False), ("A100", "A10", False), (None, "H100", False)])
def test_gpu_matches_a_model_and_its_variants(gpu, wanted, matches):
    assert skus.gpu_matches(gpu, wanted) is matches


def test_one_edit():
    names = [s.name for s in skus.all_skus()]
    assert skus.one_edit("Standard_ND96asr_v5", names) == ["Standard_ND96asr_v4"]
    assert skus.one_edit("nd96asr_v5", names) == ["Standard_ND96asr_v4"]
    assert skus.one_edit("Standard_ND96asr_v4", names) == []  # itself is not a suggestion
    assert skus.one_edit("Standard_ND192isr_H100_v5", names) == []


def test_an_unknown_size_one_edit_from_a_known_one_is_named_in_its_warning(tmp_path):
    from conftest import REPO, ts

    (tmp_path / "s.yaml").write_text(
        f"version: 1\nname: s\ncode: {REPO / 'examples' / 'mnist'}\ncommand: python train.py\n"
        "resources: {nodes: 1, sku: Standard_ND96asr_v5, gpus_per_node: 8}\nenvironment: {image: pytorch:latest}\n")
    proc = ts("validate", str(tmp_path / "s.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert ("warning: resources.sku: Standard_ND96asr_v5 is not in trainspec's catalog: trusting gpus_per_node: 8, "
            "and assuming InfiniBand (the 'r' in its name) (hint: did you mean Standard_ND96asr_v4? If not, to have "
            "it checked, add it to trainspec-skus.yaml") in proc.stderr
