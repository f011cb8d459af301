"""Secrets by reference (``secrets:``): a spec says where each platform keeps a secret, never its
value. Validation locates every problem; Kubernetes gets ``valueFrom.secretKeyRef`` (checked with
the pinned CRDs, both APIs); Slurm, HPC Pack, Ray and Azure ML get the references in
TRAINSPEC_SECRETS, which the secrets helper (runtime/secret_refs.py) reads before it execs the shim -- a file on the node, or a
Key Vault secret with the job's identity, played here by a fake identity endpoint and Key Vault
on 127.0.0.1 (TRAINSPEC_KEYVAULT_TEST_ENDPOINT: the test-only redirect of the vault's address).
Plan and diff show the references; no output, log or error holds a value or a token.
(tests/test_secrets.py is the other side: credentials written into a spec, refused and redacted.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

import kube_schema
import shim_files
from conftest import REPO, ts
from trainspec.runtime import secret_refs as helper

VALUE = "s3cr3t-value-never-printed"
TOKEN = "fake-access-token-never-printed"
MSI_SECRET = "fake-msi-header-never-printed"
HF = ("    kubernetes: {secret: hf, key: token}\n"
      "    file: /shared/secrets/hf_token\n"
      "    azureml: {keyvault: https://team-kv.vault.azure.net, name: hf-token}\n")
ALL_TARGETS = ("  slurm: {partition: gpu}\n  azureml: {compute: gpu-cluster}\n  kubernetes: {}\n"
               "  hpcpack: {shared_dir: /shared/jobs}\n  ray: {location: eastus, resource_group: rg}\n")


def write_spec(tmp_path, secrets=f"  HF_TOKEN:\n{HF}", targets=ALL_TARGETS, extra=""):
    path = tmp_path / "spec.yaml"
    path.write_text(f"""version: 1
name: sft
code: {REPO}/examples/ddp
command: python train.py --steps 3
resources: {{nodes: 2, sku: Standard_ND96isr_H100_v5}}
environment: {{image: 'pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime'}}
{extra}{"secrets:" + chr(10) + secrets if secrets else ""}targets:
{targets}""", encoding="utf-8")
    return path


def compile_errors(path, *args):
    proc = ts("compile", str(path), "-o", str(path.parent / "out"), *args, cwd=path.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not (path.parent / "out").exists()
    return [line for line in proc.stderr.splitlines() if ": error: " in line]


def compiled(tmp_path, **kw):
    path = write_spec(tmp_path, **kw)
    proc = ts("compile", str(path), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "out" / "sft"


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --- validation ---------------------------------------------------------------------------------

def test_a_listed_target_without_its_reference_is_an_error_at_the_secret_naming_target_and_key(tmp_path):
    path = write_spec(tmp_path, secrets="  WANDB_API_KEY:\n    file: /shared/secrets/wandb\n")
    errors = compile_errors(path)
    at = f"spec.yaml:{line_of(path, 'WANDB_API_KEY:')}:3: error: secrets.WANDB_API_KEY: "
    assert len(errors) == 2 and all(at in e for e in errors), errors
    assert any("no reference for Kubernetes" in e and "add secrets.WANDB_API_KEY.kubernetes: {secret: " in e
               for e in errors)
    # Azure ML reads no file: a compute cluster shares no file system trainspec can count on
    assert any("no reference for Azure ML" in e and "add secrets.WANDB_API_KEY.azureml: {keyvault: https://" in e
               for e in errors)


def test_a_target_asked_for_with_t_but_not_listed_is_held_to_its_reference_too(tmp_path):
    path = write_spec(tmp_path, secrets="  HF_TOKEN:\n    file: /shared/secrets/hf_token\n",
                      targets="  slurm: {partition: gpu}\n")
    assert ts("validate", str(path), cwd=tmp_path).returncode == 0
    errors = compile_errors(path, "-t", "kubernetes")
    assert len(errors) == 1 and "secrets.HF_TOKEN: HF_TOKEN has no reference for Kubernetes" in errors[0]


def _located(path, errors, expected):
    for key, message in expected.items():
        line = next((e for e in errors if message in e), None)
        assert line is not None, (message, errors)
        assert f"spec.yaml:{line_of(path, '  ' + key + ':')}:" in line, (key, line)


def test_names_that_collide_are_located_errors_all_in_one_run(tmp_path):
    secrets = ("  NCCL_DEBUG: {file: /s/a}\n"            # also in env
               "  RANK: {file: /s/b}\n"                  # the shim sets it
               "  TRAINSPEC_TOKEN: {file: /s/c}\n"       # the shim's own prefix
               "  PL_TRAINER_DEVICES: {file: /s/d}\n"    # trainspec sets it for Lightning
               "  1BAD: {file: /s/e}\n"                  # no variable name
               "  LONG: {azureml: {keyvault: https://a-vault-name-far-too-long-for-azure.vault.azure.net, name: x}}\n"
               "  EMPTY: {}\n")
    path = write_spec(tmp_path, secrets=secrets, targets="  slurm: {partition: gpu}\n",
                      extra="env: {NCCL_DEBUG: WARN}\n")
    errors = compile_errors(path)
    _located(path, errors, {
        "NCCL_DEBUG": "secrets.NCCL_DEBUG: NCCL_DEBUG is also in env",
        "RANK": "secrets.RANK: RANK is set by trainspec in every process",
        "TRAINSPEC_TOKEN": "secrets.TRAINSPEC_TOKEN: TRAINSPEC_TOKEN is set by trainspec",
        "PL_TRAINER_DEVICES": "secrets.PL_TRAINER_DEVICES: PL_TRAINER_DEVICES is set by trainspec",
        "1BAD": "secrets.1BAD: '1BAD' is not a valid environment variable name",
        "LONG": "secrets.LONG.azureml.keyvault: 'a-vault-name-far-too-long-for-azure' is not a Key Vault name",
        "EMPTY": "secrets.EMPTY: a secret needs at least one reference",
    })
    # Slurm reads a file: the secrets without one say so, at their key
    _located(path, errors, {"LONG": "secrets.LONG: LONG has no reference for Slurm"})


def test_references_of_the_wrong_shape_are_located_errors_that_say_what_is_expected(tmp_path):
    secrets = ("  REL: {file: secrets/rel}\n"
               "  PLAIN: {azureml: {keyvault: http://team-kv.vault.azure.net, name: x}}\n"
               "  ELSEWHERE: {azureml: {keyvault: https://team-kv.example.com, name: x}}\n"
               "  UNDERSCORE: {azureml: {keyvault: https://team-kv.vault.azure.net, name: hf_token}}\n"
               "  UPPER: {kubernetes: {secret: HF, key: token}}\n"
               "  TYPO: {files: /s/x}\n")
    path = write_spec(tmp_path, secrets=secrets, targets="  slurm: {partition: gpu}\n")
    errors = compile_errors(path)
    _located(path, errors, {
        "REL": "secrets.REL.file: is not an absolute path",
        "PLAIN": "secrets.PLAIN.azureml.keyvault: is not a Key Vault URL: https://<vault>.vault.azure.net",
        "ELSEWHERE": "secrets.ELSEWHERE.azureml.keyvault: is not a Key Vault URL",
        "UNDERSCORE": "secrets.UNDERSCORE.azureml.name: is not a Key Vault secret name",
        "UPPER": "secrets.UPPER.kubernetes.secret: is not a Secret's name",
        "TYPO": "secrets.TYPO.files",
    })


@pytest.mark.parametrize("identity, ok", [("{type: managed}", True), ("{type: user_identity}", True),
                                          ("{type: managed, client_id: 00000000-0000-0000-0000-000000000001}", True),
                                          ("{type: aml_token}", False)])
def test_only_identities_that_can_ask_for_a_key_vault_token_read_a_key_vault_secret(tmp_path, identity, ok):
    path = write_spec(tmp_path, targets=f"  azureml: {{compute: gpu-cluster, identity: {identity}}}\n")
    if ok:
        assert ts("validate", str(path), cwd=tmp_path).returncode == 0
        return
    errors = compile_errors(path)
    assert len(errors) == 1 and "targets.azureml.identity.type: secrets.HF_TOKEN is read from Key Vault" in errors[0]
    assert "use type: managed" in errors[0]


def test_a_credential_in_env_points_at_secrets(tmp_path):
    path = write_spec(tmp_path, secrets="  OTHER: {file: /s/o}\n", targets="  slurm: {}\n",
                      extra="env: {HF_TOKEN: " + "hf_" + "a" * 34 + "}\n")
    errors = compile_errors(path)
    assert len(errors) == 1 and "env.HF_TOKEN" in errors[0] and "reference it from `secrets:`" in errors[0]
    assert "hf_aaaa" not in errors[0]


# --- lowering -------------------------------------------------------------------------------------

@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_kubernetes_sets_each_secret_from_its_secret_key_valid_for_both_apis(tmp_path, api):
    out = compiled(tmp_path, targets=f"  kubernetes: {{api: {api}}}\n")
    text = (out / "kubernetes" / "job.yaml").read_text()
    assert kube_schema.validate_stream(text) == []
    job = [d for d in yaml.safe_load_all(text) if d["kind"] in ("TrainJob", "PyTorchJob")][0]
    env = (job["spec"]["trainer"]["env"] if api == "trainjob"
           else job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"])
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
    assert "TRAINSPEC_SECRETS" not in [e["name"] for e in env]  # the kubelet sets it, not the shim
    # the check is the one that would catch a broken reference
    broken = json.loads(json.dumps(job).replace('"secretKeyRef": {"name": "hf", "key": "token"}',
                                                '"secretKeyRef": {"name": "hf", "key": "token", "value": "x"}'))
    assert kube_schema.validate(broken)


def _secrets_variable(env: dict) -> list:
    return json.loads(env["TRAINSPEC_SECRETS"])


def test_every_other_target_hands_the_helper_the_reference_never_a_value(tmp_path):
    out = compiled(tmp_path)
    file_ref = [{"file": "/shared/secrets/hf_token", "variable": "HF_TOKEN"}]
    sbatch = (out / "slurm" / "job.sbatch").read_text()
    assert "export TRAINSPEC_SECRETS='" + json.dumps(file_ref, separators=(",", ":")) + "'" in sbatch
    import lxml.etree as ET

    xml = ET.parse(str(out / "hpcpack" / "job.xml"))
    values = [v.findtext("{*}Value") for v in xml.iter("{*}Variable") if v.findtext("{*}Name") == "TRAINSPEC_SECRETS"]
    assert values and all(json.loads(v) == file_ref for v in values)  # every task
    request = json.loads((out / "ray" / "trainspec_ray_job.json").read_text())
    assert _secrets_variable(request["env"]) == file_ref
    job = yaml.safe_load((out / "azureml" / "job.yml").read_text())
    assert _secrets_variable(job["environment_variables"]) == [
        {"keyvault": "https://team-kv.vault.azure.net", "secret": "hf-token", "variable": "HF_TOKEN"}]
    assert "HF_TOKEN" not in job["environment_variables"]


def test_each_cluster_job_ships_the_helper_and_runs_it_in_front_of_the_shim_only_with_secrets(tmp_path):
    out = compiled(tmp_path)
    source = Path(helper.__file__).read_bytes()
    for target in ("slurm", "hpcpack", "ray", "azureml"):
        assert (out / target / "trainspec_secret_refs.py").read_bytes() == source, target
    assert not (out / "kubernetes" / "trainspec_secret_refs.py").exists()
    sbatch = (out / "slurm" / "job.sbatch").read_text()
    assert ('python3 -I -S "$job_dir"/trainspec_secret_refs.py -- python3 -I -S "$job_dir"/trainspec_shim.py -- '
            in sbatch)
    stage = (out / "hpcpack" / "stage.sh").read_text()
    assert 'cp trainspec_secret_refs.py "$staging"/trainspec_secret_refs.py' in stage  # into the job's own folder
    assert ('-I -S &quot;$TRAINSPEC_STAGED_DIR&quot;/trainspec_secret_refs.py -- python3 -I -S '
            '&quot;$TRAINSPEC_STAGED_DIR&quot;/trainspec_shim.py') in (out / "hpcpack" / "job.xml").read_text()
    cluster = yaml.safe_load((out / "ray" / "cluster.yaml").read_text())
    assert cluster["file_mounts"]["~/trainspec/trainspec_secret_refs.py"] == "./trainspec_secret_refs.py"
    request = json.loads((out / "ray" / "trainspec_ray_job.json").read_text())
    assert "$HOME/trainspec/trainspec_secret_refs.py -- python -I -S $HOME/trainspec/trainspec_shim.py" in \
        request["command"]
    job = yaml.safe_load((out / "azureml" / "job.yml").read_text())
    assert job["inputs"]["trainspec_secret_refs"] == {"type": "uri_file", "path": "./trainspec_secret_refs.py",
                                                      "mode": "download"}
    assert job["command"].startswith("python -I -S ${{inputs.trainspec_secret_refs}} -- python -I -S "
                                     "${{inputs.trainspec_runtime}} -- ")
    # a spec without secrets: the jobs stay as they were
    plain = tmp_path / "plain"
    plain.mkdir()
    out = compiled(plain, secrets="", targets="  slurm: {}\n  azureml: {compute: gpu-cluster}\n")
    assert not list(out.glob("*/trainspec_secret_refs.py"))
    assert "trainspec_secret_refs" not in (out / "slurm" / "job.sbatch").read_text()
    assert "trainspec_secret_refs" not in (out / "azureml" / "job.yml").read_text()


def test_a_slurm_container_gets_each_secret_file_mounted_read_only(tmp_path):
    out = compiled(tmp_path, targets="  slurm: {container_image: 'nvcr.io#nvidia/pytorch:24.08-py3'}\n")
    sbatch = (out / "slurm" / "job.sbatch").read_text()
    assert ('--container-mounts="$job_dir:$job_dir,$work_dir:$work_dir",/shared/secrets/hf_token:'
            '/shared/secrets/hf_token:ro ') in sbatch
    bad = tmp_path / "bad"
    bad.mkdir()
    path = write_spec(bad, secrets="  HF_TOKEN: {file: '/shared/a,b:c'}\n",
                      targets="  slurm: {container_image: 'nvcr.io#nvidia/pytorch:24.08-py3'}\n")
    errors = compile_errors(path)
    assert len(errors) == 1 and f"spec.yaml:{line_of(path, 'HF_TOKEN')}:" in errors[0]
    assert "secrets.HF_TOKEN.file: a secret's file is mounted into the container" in errors[0]


def test_azure_ml_job_loads_and_passes_the_identity_the_vault_is_read_with(tmp_path):
    from azure.ai.ml import load_job

    out = compiled(tmp_path, targets="  azureml: {compute: gpu-cluster, identity: {type: managed, "
                                     "client_id: 00000000-0000-0000-0000-000000000001}}\n")
    job = load_job(out / "azureml" / "job.yml")
    assert job._validate().passed
    references = json.loads(job.environment_variables["TRAINSPEC_SECRETS"])
    assert references == [{"client_id": "00000000-0000-0000-0000-000000000001", "identity": "managed",
                           "keyvault": "https://team-kv.vault.azure.net", "secret": "hf-token", "variable": "HF_TOKEN"}]


def test_plan_shows_each_target_its_reference_and_diff_the_change(tmp_path):
    path = write_spec(tmp_path)
    plan = ts("plan", str(path), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    for line in ("secret: HF_TOKEN <- Secret hf, key token",
                 "secret: HF_TOKEN <- file /shared/secrets/hf_token",
                 "secret: HF_TOKEN <- Key Vault https://team-kv.vault.azure.net, secret hf-token"):
        assert line in plan.stdout, plan.stdout
    assert plan.stdout.count("secret: HF_TOKEN <- file /shared/secrets/hf_token") == 3  # Slurm, HPC Pack, Ray
    md = ts("plan", "--format", "markdown", str(path), cwd=tmp_path).stdout
    assert "secret: `HF_TOKEN <- Secret hf, key token`" in md
    old = tmp_path / "old.yaml"
    old.write_text(path.read_text().replace("/shared/secrets/hf_token", "/shared/secrets/old_token"))
    diff = ts("diff", str(old), str(path), cwd=tmp_path)
    assert "secrets.HF_TOKEN.file" in diff.stdout and "/shared/secrets/old_token" in diff.stdout, diff.stdout


# --- the helper in front of the shim: file secrets -----------------------------------------------------------------------

def _shim(tmp_path, env_extra):
    """Run the helper as compiled jobs do, in front of the real shim, with a command that proves
    what it saw: it writes a marker only when HF_TOKEN holds VALUE (never printed)."""
    marker = tmp_path / "ran"
    probe = (f"import os, pathlib; pathlib.Path({str(marker)!r}).write_text("
             f"'ok' if os.environ.get('HF_TOKEN') == {VALUE!r} else 'wrong')")
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_proxy", "_PROXY"))}
    env.update({"TRAINSPEC_SPEC": "specs/sft.yaml", **env_extra})
    shim = shim_files.ship("slurm", tmp_path / "job")
    proc = subprocess.run([sys.executable, "-I", "-S", str(helper.__file__), "--",
                           sys.executable, "-I", "-S", str(shim), "--", sys.executable, "-c", probe],
                          env=env, capture_output=True, text=True, timeout=60)
    return proc, marker


def test_the_helper_sets_a_file_secret_before_the_shim_and_command_without_printing_it(tmp_path):
    secret = tmp_path / "hf_token"
    secret.write_text(VALUE + "\n")  # as `echo value > file` writes it: the newline is dropped
    references = json.dumps([{"variable": "HF_TOKEN", "file": str(secret)}])
    proc, marker = _shim(tmp_path, {"TRAINSPEC_SECRETS": references})
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ok"
    assert VALUE not in proc.stdout + proc.stderr


@pytest.mark.parametrize("problem, words", [("missing", "cannot read it on this node (No such file or directory)"),
                                            ("folder", "cannot read it on this node (Is a directory)"),
                                            ("empty", "the value is empty"),
                                            ("large", "the file holds more than 65536 bytes")])
def test_an_unreadable_secret_file_ends_the_job_before_the_command_naming_file_and_variable(tmp_path, problem, words):
    secret = tmp_path / "hf_token"
    if problem == "folder":
        secret.mkdir()
    elif problem != "missing":
        secret.write_text("" if problem == "empty" else VALUE * 3000)
    references = json.dumps([{"variable": "HF_TOKEN", "file": str(secret)}])
    proc, marker = _shim(tmp_path, {"TRAINSPEC_SECRETS": references})
    assert proc.returncode == 3 and not marker.exists()
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"trainspec: error: specs/sft.yaml: secrets.HF_TOKEN (file {secret}): "), line
    assert words in line, line
    assert VALUE not in proc.stdout + proc.stderr


# --- the helper: Azure Key Vault, played by a fake identity endpoint and vault on 127.0.0.1 -------------

class FakeAzure(BaseHTTPRequestHandler):
    """The managed identity endpoint as Azure ML compute serves it (MSI_ENDPOINT + header `secret`,
    api-version 2017-09-01, resource, clientid for a user-assigned identity: azure-identity's
    AzureMLCredential), the App Service-style one (IDENTITY_ENDPOINT + X-IDENTITY-HEADER,
    2019-08-01), the on-behalf-of one (OBO_ENDPOINT, resource only), and Key Vault's
    GET /secrets/{name}?api-version=7.4 (401 without the Bearer token, 403, 404, 200)."""

    requests: list = []
    slow = threading.Event()

    def log_message(self, *args):
        pass

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        FakeAzure.requests.append((url.path, query, dict(self.headers)))
        token = {"access_token": TOKEN, "expires_on": "1700000000", "resource": query.get("resource"),
                 "token_type": "Bearer"}
        if url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path == "/slow":
            FakeAzure.slow.wait(5)  # bounded: the shim gives up first
            return self._answer(500, {})
        if url.path == "/msi":
            ok = (self.headers.get("secret") == MSI_SECRET and query.get("api-version") == "2017-09-01"
                  and query.get("resource") == "https://vault.azure.net")
            return self._answer(200, token) if ok else self._answer(400, {"error": "invalid_request"})
        if url.path == "/identity":
            ok = (self.headers.get("X-IDENTITY-HEADER") == MSI_SECRET and query.get("api-version") == "2019-08-01"
                  and query.get("resource") == "https://vault.azure.net")
            return self._answer(200, token) if ok else self._answer(400, {"error": "invalid_request"})
        if url.path == "/obo":
            ok = query == {"resource": "https://vault.azure.net"}
            return self._answer(200, token) if ok else self._answer(400, {"error": "invalid_request"})
        if url.path.startswith("/secrets/"):
            name = url.path[len("/secrets/"):]
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, {"error": {"code": "Unauthorized", "message": "no bearer"}})
            if query.get("api-version") != "7.4":
                return self._answer(400, {"error": {"code": "BadParameter"}})
            if name == "forbidden":
                return self._answer(403, {"error": {"code": "Forbidden", "message": "not allowed"}})
            if name != "hf-token":
                return self._answer(404, {"error": {"code": "SecretNotFound", "message": "missing"}})
            return self._answer(200, {"value": VALUE, "id": f"https://team-kv.vault.azure.net/secrets/{name}/1"})
        self._answer(404, {})


@pytest.fixture
def azure():
    FakeAzure.requests = []
    FakeAzure.slow.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAzure)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    FakeAzure.slow.set()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _vault(azure, name="hf-token", **more):
    return json.dumps([{"variable": "HF_TOKEN", "keyvault": "https://team-kv.vault.azure.net", "secret": name,
                        **more}])


def _msi(azure, **more):
    return {"MSI_ENDPOINT": f"{azure}/msi", "MSI_SECRET": MSI_SECRET, "TRAINSPEC_KEYVAULT_TEST_ENDPOINT": azure,
            "TRAINSPEC_SPEC": "specs/sft.yaml", **more}


def test_the_helper_reads_a_key_vault_secret_with_the_compute_managed_identity(tmp_path, azure):
    proc, marker = _shim(tmp_path, {**_msi(azure), "TRAINSPEC_SECRETS": _vault(azure)})
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "ok"
    assert not {VALUE, TOKEN, MSI_SECRET} & set((proc.stdout + proc.stderr).split())
    (msi_path, msi_query, _), (vault_path, vault_query, headers) = FakeAzure.requests
    assert msi_path == "/msi" and "clientid" not in msi_query
    assert vault_path == "/secrets/hf-token" and vault_query == {"api-version": "7.4"}
    assert headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_user_assigned_identity_is_asked_for_by_its_client_id(azure):
    env = _msi(azure, TRAINSPEC_SECRETS=_vault(azure, identity="managed", client_id="c-1"),
               DEFAULT_IDENTITY_CLIENT_ID="c-default")
    assert helper.secret_values(env) == {"HF_TOKEN": VALUE}
    assert FakeAzure.requests[0][1]["clientid"] == "c-1"
    FakeAzure.requests.clear()
    env["TRAINSPEC_SECRETS"] = _vault(azure, identity="managed")  # the compute's default identity
    assert helper.secret_values(env) == {"HF_TOKEN": VALUE}
    assert FakeAzure.requests[0][1]["clientid"] == "c-default"


def test_identity_endpoint_and_on_behalf_of_endpoint_are_asked_as_azure_identity_asks(azure):
    env = {"IDENTITY_ENDPOINT": f"{azure}/identity", "IDENTITY_HEADER": MSI_SECRET,
           "TRAINSPEC_KEYVAULT_TEST_ENDPOINT": azure, "TRAINSPEC_SECRETS": _vault(azure)}
    assert helper.secret_values(env) == {"HF_TOKEN": VALUE}
    env = {**_msi(azure), "OBO_ENDPOINT": f"{azure}/obo", "TRAINSPEC_SECRETS": _vault(azure, identity="user_identity")}
    assert helper.secret_values(env) == {"HF_TOKEN": VALUE}
    assert [r[0] for r in FakeAzure.requests][-2:] == ["/obo", "/secrets/hf-token"]


@pytest.mark.parametrize("name, env_change, words", [
    ("missing-one", {}, "the vault has no such secret (or it is disabled) (HTTP 404, SecretNotFound)"),
    ("forbidden", {}, "the job's identity may not read it: grant it the Key Vault Secrets User role"),
    ("hf-token", {"MSI_SECRET": "wrong"}, "the managed identity (MSI_ENDPOINT) gave no token for "
                                          "https://vault.azure.net (HTTP 400, invalid_request)"),
    ("hf-token", {"MSI_ENDPOINT": None, "MSI_SECRET": None}, "this job has no identity to ask Key Vault with"),
    ("hf-token", {"TRAINSPEC_SECRETS_IDENTITY": "user_identity"}, "OBO_ENDPOINT is not set"),
    ("hf-token", {"TRAINSPEC_KEYVAULT_TEST_ENDPOINT": "http://example.com:80"}, "only a test sets it"),
])
def test_key_vault_problems_are_one_line_naming_variable_vault_and_secret_never_the_token(
        tmp_path, azure, name, env_change, words):
    identity = env_change.pop("TRAINSPEC_SECRETS_IDENTITY", None)
    env = {**_msi(azure), "TRAINSPEC_SECRETS": _vault(azure, name, **({"identity": identity} if identity else {}))}
    for key, value in env_change.items():
        env.pop(key) if value is None else env.__setitem__(key, value)
    proc, marker = _shim(tmp_path, env)
    assert proc.returncode == 3 and not marker.exists(), proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("trainspec: error:")]
    assert len(errors) == 1 and words in errors[0], proc.stderr
    line = errors[0]
    if "only a test" not in words:
        assert line.startswith(f"trainspec: error: specs/sft.yaml: secrets.HF_TOKEN (Key Vault "
                               f"https://team-kv.vault.azure.net, secret {name}): "), line
    assert TOKEN not in line and VALUE not in line and MSI_SECRET not in line


def test_a_token_key_vault_refuses_is_a_401_and_the_vault_needs_the_bearer_token(azure, monkeypatch):
    env = {**_msi(azure), "TRAINSPEC_SECRETS": _vault(azure)}
    monkeypatch.setattr(helper, "_identity_token", lambda *args: "another-token")
    with pytest.raises(helper.SecretError, match=r"Key Vault did not accept the job's token \(HTTP 401, Unauthorized\)"):
        helper.secret_values(env)
    assert "Authorization" in FakeAzure.requests[-1][2]


def test_every_request_is_bounded_by_a_timeout(azure, monkeypatch):
    monkeypatch.setattr(helper, "SECRET_TIMEOUT", 0.5)
    env = {**_msi(azure), "MSI_ENDPOINT": f"{azure}/slow", "TRAINSPEC_SECRETS": _vault(azure)}
    with pytest.raises(helper.SecretError, match=r"cannot reach 127\.0\.0\.1:\d+ within 0\.5 s"):
        helper.secret_values(env)


def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(azure):
    status, _ = helper._http_get(f"{azure}/redirect", {"Authorization": f"Bearer {TOKEN}"}, "here")
    assert status == 302
    assert [r[0] for r in FakeAzure.requests] == ["/redirect"]  # never /elsewhere


# --- a compiled job played locally: the helper, the shim and the command, as the platform runs them ---

def _local_spec(tmp_path, reference, targets):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "check.py").write_text(
        "import os\nprint('HF_OK' if os.environ.get('HF_TOKEN') == %r else 'HF_WRONG', os.environ['NODE_RANK'])\n"
        % VALUE)
    path = tmp_path / "spec.yaml"
    path.write_text(f"""version: 1
name: sec
code: code
command: python check.py
resources: {{nodes: 2, gpus_per_node: 0}}
environment: {{image: pytorch/pytorch:latest}}
secrets:
  HF_TOKEN: {reference}
targets:
{targets}""")
    return path


@pytest.mark.realproc
@pytest.mark.parametrize("target", ["slurm", "hpcpack"])
def test_a_job_played_locally_reads_its_file_secret_on_every_node(tmp_path, target):
    (tmp_path / "hf").write_text(VALUE + "\n")
    path = _local_spec(tmp_path, f"{{file: {tmp_path / 'hf'}}}",
                       f"  slurm: {{}}\n  hpcpack: {{shared_dir: {tmp_path / 'shared'}}}\n")
    proc = ts("run", str(path), "--local", "-t", target, "--timeout", "120", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "[node 0] HF_OK 0" in out and "[node 1] HF_OK 1" in out
    assert VALUE not in out


@pytest.mark.realproc
def test_an_azure_ml_job_played_locally_reads_key_vault_before_the_command_and_stops_without_an_identity(tmp_path):
    """The job.yml as played (its command, its trainspec_secret_refs input): with no identity
    endpoint here the helper stops every process before the command, in one line each.
    (The local player passes no TRAINSPEC_* of this shell to the job, so the fake vault's redirect
    cannot reach it: the Key Vault path itself is played above, helper and shim as shipped.)"""
    path = _local_spec(tmp_path, "{azureml: {keyvault: https://team-kv.vault.azure.net, name: hf-token}}",
                       "  azureml: {identity: {type: managed}}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MSI_ENDPOINT", "IDENTITY_ENDPOINT", "OBO_ENDPOINT")}
    proc = ts("run", str(path), "--local", "-t", "azureml", "--timeout", "120", cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "HF_OK" not in out and "HF_WRONG" not in out
    assert ("[node 1] trainspec: error: spec.yaml: secrets.HF_TOKEN (Key Vault https://team-kv.vault.azure.net, "
            "secret hf-token): this job has no identity to ask Key Vault with") in out


@pytest.mark.realproc
@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_a_kubernetes_job_played_locally_takes_a_secret_from_this_shell_and_says_so(tmp_path, api):
    """No Secret is here: the pods get this shell's variable of the secret's name (run --local)."""
    path = _local_spec(tmp_path, "{kubernetes: {secret: hf, key: token}}", f"  kubernetes: {{api: {api}}}\n")
    proc = ts("run", str(path), "--local", "-t", "kubernetes", "--timeout", "120", cwd=tmp_path,
              env={**os.environ, "HF_TOKEN": VALUE})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "trainspec: HF_TOKEN: from Secret hf, key token in the cluster; this shell's" in out
    assert "[node 0] HF_OK 0" in out and "[node 1] HF_OK 1" in out and VALUE not in out
