"""tests/kube_schema.py: Kubernetes documents checked strictly against the pinned CRDs (+ CEL).

Kubeflow's own example jobs and runtimes must pass. Each broken copy is a minimal pair with a
good document: one field broken, an error at exactly that field's path; and the same copy must
PASS when the one check meant to catch it is turned off (`without=`), so the case proves that
check and a regression in it (say, `additionalProperties: false` lost) fails the test.
"""

import copy
from pathlib import Path

import pytest
import yaml

pytest.importorskip("celpy", reason="cel-python is a test extra: pip install cel-python")
pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a test extra")

import kube_schema  # noqa: E402
from kube_schema import REFERENCE, TRAINER, TRAINING_OPERATOR, validate, validate_stream  # noqa: E402

pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"the pinned Kubeflow files are not at {REFERENCE}")

EXAMPLES = sorted([*(TRAINER / "examples").glob("*.yaml"), *(TRAINER / "runtimes").glob("*.yaml"),
                   *(TRAINING_OPERATOR / "examples").glob("*.yaml")]) if REFERENCE.is_dir() else []


def load(path: Path, kind: str = None) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return copy.deepcopy(next(d for d in docs if kind is None or d["kind"] == kind))


def trainjob():
    return load(TRAINER / "examples" / "02-runtime-patches.yaml")


def pytorchjob():
    return load(TRAINING_OPERATOR / "examples" / "simple.yaml")


def runtime():
    return load(TRAINER / "runtimes" / "torch_distributed.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_kubeflows_own_examples_and_runtimes_pass(path):
    assert len(kube_schema.load_documents(path.read_text())) >= 1
    assert validate_stream(path.read_text()) == []


def test_every_pinned_crd_is_read():
    assert {kind for (_, kind) in kube_schema._crds()} == {
        "TrainJob", "ClusterTrainingRuntime", "TrainingRuntime", "PyTorchJob"}


def broken(make, edit):
    doc = make()
    edit(doc)
    return doc


def set_in(path, value):
    def edit(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


MASTER = ["spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0]
LONG_NAME = "a" * 64  # a DNS-1123 subdomain (<= 253), not a <= 63 character DNS-1035 label

CASES = [
    # (id, document, path of the error, words in it, the check that catches it)
    ("unknown-key-trainer", broken(trainjob, set_in(["spec", "trainer", "numProcsPerNode"], 2)),
     "spec.trainer.numProcsPerNode", "unknown field", "unknown-fields"),
    ("unknown-key-deep-in-pod", broken(pytorchjob, set_in([*MASTER, "imagePullPolicyy"], "Always")),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagePullPolicyy", "unknown field", "unknown-fields"),
    ("unknown-key-in-runtime-patch", broken(trainjob, set_in(
        ["spec", "runtimePatches", 0, "trainingRuntimeSpec", "template", "spec", "replicatedJobs", 0, "template",
         "spec", "template", "spec", "containers"], [{"name": "node", "resources": {"limits": {"cpu": "1"}}}])),
     "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
     ".containers[0].resources", "unknown field", "unknown-fields"),  # resources are not patchable
    ("unknown-key-in-runtime", broken(runtime, set_in(["spec", "mlPolicy", "torch", "nprocPerNode"], 2)),
     "spec.mlPolicy.torch.nprocPerNode", "unknown field", "unknown-fields"),
    ("nprocPerNode-integer", broken(pytorchjob, set_in(["spec", "nprocPerNode"], 8)),
     "spec.nprocPerNode", "8 is not of type 'string'", "types"),
    ("command-a-string", broken(trainjob, set_in(["spec", "trainer", "command"], "torchrun train.py")),
     "spec.trainer.command", "is not of type 'array'", "types"),
    ("image-null", broken(trainjob, set_in(["spec", "trainer", "image"], None)),
     "spec.trainer.image", "None is not of type 'string'", "types"),
    ("int-or-string-a-list", broken(trainjob, set_in(["spec", "trainer", "resourcesPerNode", "limits", "cpu"], [4])),
     "spec.trainer.resourcesPerNode.limits.cpu", "not an integer or a string", "types"),
    ("numNodes-0", broken(trainjob, set_in(["spec", "trainer", "numNodes"], 0)),
     "spec.trainer.numNodes", "less than 1", "sense"),
    ("numProcPerNode-over-int32", broken(trainjob, set_in(["spec", "trainer", "numProcPerNode"], 2 ** 31)),
     "spec.trainer.numProcPerNode", "greater than the maximum of 2147483647", "bounds"),
    ("activeDeadlineSeconds-0", broken(trainjob, set_in(["spec", "activeDeadlineSeconds"], 0)),
     "spec.activeDeadlineSeconds", "less than the minimum of 1", "bounds"),
    ("name-dns1035-cel", broken(trainjob, set_in(["metadata", "name"], "2k8s-ddp")),
     "<document>", "RFC 1035 DNS label", "cel"),  # a valid DNS-1123 name: only the CRD's CEL rejects it
    ("name-64-characters-cel", broken(trainjob, set_in(["metadata", "name"], LONG_NAME)),
     "<document>", "no more than 63 characters", "cel"),
    ("managedBy-cel", broken(trainjob, set_in(["spec", "managedBy"], "example.com/my-controller")),
     "spec.managedBy", "ManagedBy must be", "cel"),
    ("storageUri-cel", broken(trainjob, set_in(["spec", "initializer"], {"model": {"storageUri": "hf-model"}})),
     "spec.initializer.model.storageUri", "must be a valid URI", "cel"),
    ("runtime-two-policies-cel", broken(runtime, set_in(["spec", "mlPolicy", "mpi"], {"numProcPerNode": 1})),
     "spec.mlPolicy", "Only one of the policy", "cel"),
    ("label-value-a-bool", broken(trainjob, set_in(["metadata", "labels"], {"team": True})),
     "metadata.labels['team']", "must be a string", "metadata"),
    ("label-key-syntax", broken(pytorchjob, set_in(["metadata", "labels"], {"bad key": "x"})),
     "metadata.labels['bad key']", "label key", "metadata"),
    ("namespace-syntax", broken(trainjob, set_in(["metadata", "namespace"], "ML_Team")),
     "metadata.namespace", "DNS-1123 label", "metadata"),
    ("pod-template-label-key", broken(pytorchjob, set_in(
        ["spec", "pytorchReplicaSpecs", "Worker", "template", "metadata"], {"labels": {"-x": "y"}})),
     "spec.pytorchReplicaSpecs.Worker.template.metadata.labels['-x']", "label key", "metadata"),
    ("duplicate-env-name", broken(trainjob, set_in(["spec", "trainer", "env"], [
        {"name": "A", "value": "1"}, {"name": "A", "value": "2"}])),
     "spec.trainer.env[1]", "duplicate entry name=\"A\"", "list-keys"),
    ("reserved-PET-env", broken(trainjob, set_in(["spec", "trainer", "env"], [{"name": "PET_NNODES", "value": "2"}])),
     "spec.trainer.env", "reserved envs", "webhook"),
    ("two-masters", broken(pytorchjob, set_in(["spec", "pytorchReplicaSpecs", "Master", "replicas"], 2)),
     "spec.pytorchReplicaSpecs.Master.replicas", "must be 1", "webhook"),
    ("container-not-pytorch", broken(pytorchjob, set_in([*MASTER, "name"], "trainer")),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers", "name pytorch", "webhook"),
]


def errors_at(errors, path):
    return [e for e in errors if e.startswith(path + ": ")]


@pytest.mark.parametrize("doc, path, words, check", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_copy_fails_at_its_path_and_only_through_its_check(doc, path, words, check):
    errors = validate(doc)
    found = errors_at(errors, path)
    assert found and any(words in e for e in found), errors
    # the check named is the one that catches it: without it, nothing is said at that path
    assert errors_at(validate(doc, without={check}), path) == []


def test_a_name_that_is_no_label_at_all_fails_two_ways():
    """`2k8s_ddp`: not a DNS-1123 subdomain (ObjectMeta's rule) nor a DNS-1035 label (the CRD's CEL)."""
    doc = broken(trainjob, set_in(["metadata", "name"], "2k8s_ddp"))
    errors = validate(doc)
    assert any(e.startswith("metadata.name: '2k8s_ddp' must be a DNS-1123 subdomain") for e in errors), errors
    assert any("RFC 1035 DNS label" in e for e in errors_at(errors, "<document>")), errors
    assert validate(doc, without={"metadata", "cel"}) == []


def test_pytorchjob_names_are_dns1035_for_its_webhook():
    assert errors_at(validate(broken(pytorchjob, set_in(["metadata", "name"], "2k8s-ddp"))), "metadata.name")


def test_transition_rules_do_not_apply_at_creation():
    """`self == oldSelf` (immutability) cannot be evaluated without an old object: the TrainJob
    CRD has such rules on runtimeRef, trainer, ...; evaluated, they would fail every job."""
    result, problem = kube_schema._cel("self == oldSelf", {"name": "x"})
    assert result is None and problem
    assert validate(trainjob()) == []


def test_the_strict_schema_closes_objects_unless_the_crd_keeps_unknown_fields():
    schema = {"type": "object", "properties": {
        "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "count": {"type": "integer", "format": "int32", "nullable": True},
        "port": {"x-kubernetes-int-or-string": True},
        "embedded": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {"type": "object"}}},
    }}
    strict = kube_schema.strict_schema(schema)
    props = strict["properties"]
    assert strict["additionalProperties"] is False and props["closed"]["additionalProperties"] is False
    assert "additionalProperties" not in props["open"]
    assert props["map"]["additionalProperties"] == {"type": "string"}
    assert props["count"] == {"type": ["integer", "null"], "minimum": -2 ** 31, "maximum": 2 ** 31 - 1}
    assert props["port"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(props["embedded"]["properties"])
    assert props["embedded"]["additionalProperties"] is False


# --- core objects of a multi-document file -------------------------------------------------------

def configmap(**data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe-code"}, "data": data}


def test_configmap_keys_and_size():
    assert validate(configmap(**{"probe.py": "print(1)\n", "a-b_c.d": ""})) == []
    assert errors_at(validate(configmap(**{"my probe.py": "x"})), "data['my probe.py']")
    assert errors_at(validate(configmap(**{"..x": "x"})), "data['..x']")
    limit = kube_schema.MAX_CONFIGMAP_BYTES
    assert validate(configmap(big="x" * limit)) == []
    assert any("at most 1048576" in e for e in errors_at(validate(configmap(big="x" * (limit + 1))), "data"))
    assert errors_at(validate(configmap(big="x" * (limit + 1)), without={"metadata"}), "data")  # not a metadata rule


def test_core_objects_are_strict_too():
    doc = configmap(a="1")
    doc["metadata"]["labelz"] = {}
    assert errors_at(validate(doc), "metadata.labelz")
    doc = configmap(a=1)  # a YAML number where Kubernetes wants a string
    assert errors_at(validate(doc), "data.a")
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}}}
    assert validate(pvc) == []
    pvc["spec"]["storageClass"] = "azurefile"  # the field is storageClassName
    assert errors_at(validate(pvc), "spec.storageClass")
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc"}, "spec": {"clusterIP": "None"}}
    assert errors_at(validate(service), "metadata.name")  # Services are DNS-1035 labels


def test_unknown_kinds_and_versions_are_errors():
    assert validate({"apiVersion": "trainer.kubeflow.org/v1", "kind": "TrainJob", "metadata": {"name": "x"}})
    assert validate({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}})
    assert validate(["not", "a", "map"])


def test_a_multi_document_file_names_the_document_of_each_error():
    job = trainjob()
    job["spec"]["trainer"]["numNodes"] = 0
    text = yaml.safe_dump_all([configmap(**{"probe.py": "x"}), job, configmap(other="y")])
    errors = validate_stream(text)
    assert errors == [
        "TrainJob/runtime-patches-example (document 2): spec.trainer.numNodes: 0 is less than 1 (the API server "
        "accepts it: the pinned CRD has no minimum; the job would train nothing)",
        "ConfigMap/probe-code (document 3): metadata.name: the same ConfigMap as document 1",
    ]
