"""What a target cannot run, as data (trainspec/compiler/capabilities.py): the loop that turns a
target's CANNOT_RUN table into located diagnostics, the tables themselves, and the generated
feature x target matrix (docs/capabilities.md), which must be what the tables say."""

import string
import subprocess
import sys

import pytest

from conftest import REPO, ts
from trainspec.registry.build import build
from trainspec.registry.build import target
from trainspec.compiler import capabilities
from trainspec.compiler.capabilities import Entry, Feature, only, problem, unsupported
from trainspec.registry import TARGETS

PAGE = REPO / "docs" / "capabilities.md"
GENERATOR = REPO / "docs" / "gen_capabilities.py"


def target_tables():
    return {name: target(name).CANNOT_RUN for name in TARGETS}
# names a target's cannot_express passes to capabilities.check() for its messages (besides spec.x and
# the occurrence's own fields): azureml's compute cluster (test_azureml_names_the_cluster_of_a_spot_job)
PASSED = {"azureml": {"compute"}}


def valid_spec(tmp_path, body=""):
    """A ValidSpec, and the document that locates its diagnostics."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: job
code: {REPO}/examples/ddp
command: python train.py
environment: {{image: 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04'}}
resources:
  nodes: 2
  sku: Standard_ND96isr_H100_v5
{body}""")
    outcome = build(str(spec), tmp_path / "out", ["azureml"], lower=False)
    assert outcome.valid is not None, [d.render() for d in outcome.diagnostics]
    return outcome.valid, outcome.document


def test_a_feature_the_spec_uses_is_reported_at_its_field(tmp_path):
    valid, doc = valid_spec(tmp_path, "  spot: true\n")
    table = {Feature.SPOT: unsupported("spot capacity here", "remove it", fatal=False)}
    [found] = [doc.locate(d) for d in capabilities.check("tgt", table, valid)]
    assert (found.severity, found.path, found.message, found.hint) == (
        "warning", ("resources", "spot"), "tgt cannot express spot capacity here", "remove it")
    assert (found.line, found.col) == (9, 9)  # `  spot: true`, the value
    assert found.render() == f"{found.file}:9:9: warning: resources.spot: tgt cannot express spot capacity here " \
                             "(hint: remove it)"


def test_a_feature_the_spec_does_not_use_is_not_reported(tmp_path):
    valid, _ = valid_spec(tmp_path)
    table = {Feature.SPOT: unsupported("spot"), Feature.ENV_AZUREML: unsupported(), Feature.SHM_SIZE: unsupported("x")}
    assert capabilities.check("tgt", table, valid) == []


def test_severity_and_wording_follow_the_entry(tmp_path):
    valid, _ = valid_spec(tmp_path, "  spot: true\n")
    [fatal] = capabilities.check("tgt", {Feature.SPOT: unsupported("spot")}, valid)
    assert fatal.is_error and fatal.message == "tgt cannot express spot" and fatal.hint is None
    [written] = capabilities.check("tgt", {Feature.SPOT: problem("spot is the cluster's", "see {spec.name}",
                                                                  fatal=False)}, valid)
    assert not written.is_error and written.message == "spot is the cluster's" and written.hint == "see job"


def test_an_entry_applies_only_when_its_condition_holds(tmp_path):
    valid, _ = valid_spec(tmp_path, "  spot: true\n")
    seen = []

    def test(v):
        seen.append(v)
        return v.spec.resources.nodes > 4

    assert capabilities.check("tgt", {Feature.SPOT: unsupported("spot", when=only("on many nodes", test))}, valid) == []
    assert seen == [valid]
    assert len(capabilities.check("tgt", {Feature.SPOT: unsupported("spot", when=only("2 nodes", lambda v: True))},
                                  valid)) == 1


def test_every_occurrence_is_reported_with_its_own_fields_and_the_standard_wording(tmp_path):
    valid, doc = valid_spec(tmp_path, "inputs:\n  a: {path: 'https://example.org/a'}\n"
                                      "  b: {path: 'azureml:mnist@latest'}\n  c: {path: /data/c}\n")
    table = {Feature.INPUT_URL: unsupported(), Feature.INPUT_DATA_ASSET: unsupported(hint=None)}
    found = [doc.locate(d) for d in capabilities.check("tgt", table, valid)]
    assert [(d.path, d.message, d.hint, d.line) for d in found] == [
        (("inputs", "a", "path"), "tgt cannot express the remote data 'https://example.org/a'",
         "give an absolute path on storage the nodes mount", 10),
        (("inputs", "b", "path"), "tgt cannot express the remote data 'azureml:mnist@latest'", None, 11)]


def test_an_entry_without_words_needs_a_feature_with_standard_ones(tmp_path):
    valid, _ = valid_spec(tmp_path, "  spot: true\n")
    with pytest.raises(ValueError, match="SPOT has no standard wording"):
        capabilities.check("tgt", {Feature.SPOT: unsupported()}, valid)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_table_names_only_catalogued_features_and_fields_its_messages_get(name):
    table = target(name).CANNOT_RUN
    assert table, f"{name} has an empty CANNOT_RUN"
    for feature, entry in table.items():
        assert isinstance(feature, Feature) and isinstance(entry, Entry), (name, feature)
        what, hint = entry.texts(feature)  # raises when a left-out part has no standard wording
        known = {"spec", *feature.fields, *PASSED.get(name, ())}
        for template in (what, hint or ""):
            roots = {field.split(".")[0].split("[")[0]
                     for _, field, _, _ in string.Formatter().parse(template) if field is not None}
            assert roots <= known, f"{name} {feature.name}: {template!r} names {sorted(roots - known)}"


def test_the_catalogue_has_no_unused_feature():
    used = {feature for name in TARGETS for feature in target(name).CANNOT_RUN}
    assert [f.name for f in Feature if f not in used] == []


def test_azureml_names_the_cluster_of_a_spot_job(tmp_path):
    """The one message that names a value the target computes (the bare compute name)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""version: 1
name: job
code: {REPO}/examples/ddp
command: python train.py
environment: {{image: 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04'}}
resources: {{nodes: 2, gpus_per_node: 8, spot: true}}
targets:
  azureml: {{compute: 'azureml:gpu-cluster'}}
""")
    proc = ts("validate", str(spec), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("spec.yaml:6:47: warning: resources.spot: on the cluster 'gpu-cluster' spot capacity is the cluster's "
            "VM priority, not the job's (hint: create the cluster with tier low_priority; job_tier: spot applies "
            "to serverless jobs)") in proc.stderr, proc.stderr


def test_an_input_url_is_remote_data_on_the_clusters_storage_but_not_on_ray(tmp_path):
    valid, _ = valid_spec(tmp_path, "inputs:\n  a: {path: 'https://example.org/a'}\n")
    assert [d.message for d in target("slurm").cannot_express(valid) if d.path == ("inputs", "a", "path")] == [
        "slurm cannot express the remote data 'https://example.org/a'"]
    assert [d for d in capabilities.check("ray", target("ray").CANNOT_RUN, valid) if d.path[0] == "inputs"] == []


# --- the matrix page ---------------------------------------------------------------------------

def test_the_matrix_page_is_what_the_tables_say():
    assert capabilities.matrix(target_tables()) == PAGE.read_text(encoding="utf-8"), \
        "docs/capabilities.md is stale: run python docs/gen_capabilities.py"
    check = subprocess.run([sys.executable, str(GENERATOR), "--check"],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_changed_table_makes_the_page_stale(tmp_path):
    tables = target_tables()
    page = PAGE.read_text(encoding="utf-8")
    changed = {**tables, "slurm": {**tables["slurm"], Feature.NO_SKU: problem("Slurm <needs> a size", "set `sku`")}}
    fresh = capabilities.matrix(changed)
    assert fresh != page
    row = next(line for line in fresh.splitlines() if line.startswith("| [no VM size"))
    assert row.endswith("compute) | supported | error | error | supported |")  # azureml (serverless), hpcpack, ray, slurm, kubernetes
    assert "| `slurm` | error | Slurm &lt;needs&gt; a size | set \\`sku\\` |" in fresh
    stale = tmp_path / "capabilities.md"
    stale.write_text(page.replace("| warning |", "| error |", 1))
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check", str(stale)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 1 and "stale" in proc.stdout


def test_the_matrix_shows_every_feature_and_every_target():
    page = PAGE.read_text(encoding="utf-8")
    header = next(line for line in page.splitlines() if line.startswith("| Feature |"))
    assert all(f"[`{name}`](targets/{name}.md)" in header for name in TARGETS)
    for feature in Feature:
        assert f"(#{feature.anchor})" in page and f"{{#{feature.anchor}}}" in page
    # a message as a user sees it, with its hint, and a placeholder for what the spec fills in
    assert "| `hpcpack` | error | hpcpack cannot express the remote data '&lt;path&gt;' | say where it is on the " \
           "nodes' shared storage: targets.hpcpack.volumes.&lt;name&gt;: \\{path: /shared/...\\} |" in page
    assert "| `slurm` | warning (with targets.slurm.container: false) |" in page
