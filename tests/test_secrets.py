"""Issue 27: secrets never travel as values. A value that looks like a credential (a variable
named like one with a literal value, or a string shaped like a known token) is an error at its
line with a hint, in every format, with or without --strict, and the value is never printed: not
by validate or compile, not by plan, diff or check, not even when the base revision of a review
or a committed output still holds it.

The tokens below are made up, and built from pieces so that no scanner takes this file for a leak.
"""

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import REPO, flow, git, ts
from trainspec.core import secrets
from trainspec.core.diagnostics import SpecError, error
from trainspec.schema.loader import load_bytes

LOCATED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): error: (?P<field>[^:]+): (?P<message>.*) "
                     r"\(hint: (?P<hint>.*)\)$")
AZURE_KEY = base64.b64encode(bytes(range(7, 71))).decode()  # 64 bytes: 88 characters ending ==
# (kind's words in the message, the value, the part of it that must never be printed)
SHAPED = {
    "hugging-face": ("Hugging Face", "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3", "aB3dE5gH7jK9mN1pQ3sT5"),
    "github": ("GitHub", "ghp_" + "Zx81" * 9, "Zx81Zx81Zx81Zx81"),
    "github-pat": ("GitHub", "github_pat_" + "11ABCDEFG0" * 3 + "_" + "q9W8e7R6t5" * 5, "q9W8e7R6t5q9W8e7"),
    "aws": ("AWS", "AKIA" + "Q7ZX3M2K9VNP4RTY", "Q7ZX3M2K9VNP4RTY"),
    "slack": ("Slack", "xoxb-" + "218364920141-" + "5nD0tA9kYq3r8sV2LmZ", "5nD0tA9kYq3r8sV2LmZ"),
    "openai": ("API key", "sk-" + "proj-" + "T3BlbkFJ" * 5, "T3BlbkFJT3BlbkFJ"),
    "jwt": ("JSON Web Token", "eyJ" + "hbGciOiJIUzI1NiJ9." + "eyJ" + "zdWIiOiJ0cmFpbnNwZWMifQ." + "Q29kZVNpZ25hdHVyZQ",
            "zdWIiOiJ0cmFpbnNwZWMifQ"),
    "azure-storage-key": ("Azure storage account key", AZURE_KEY, AZURE_KEY[:40]),
    "connection-string": ("connection string", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
                          + AZURE_KEY[:44] + ";EndpointSuffix=core.windows.net", AZURE_KEY[:44]),
    "sas-url": ("SAS URL", "https://acct.blob.core.windows.net/data?sv=2022-11-02&sr=c&sig=" + "k7Pq%2Bz9XwY3mR5tV8nB1cL%3D",
                "k7Pq%2Bz9XwY3mR5tV8nB1cL"),
    "url-password": ("password in a URL", "https://trainer:" + "Wq8-nZ3vP0" + "@git.example.com/team/data.git", "Wq8-nZ3vP0"),
    "private-key": ("private key", "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END", "b3BlbnNzaC1rZXktdjEAAAAA"),
}
NAMED = ["HF_TOKEN", "WANDB_API_KEY", "AZURE_CLIENT_SECRET", "DB_PASSWORD", "mysql_passwd", "TOKEN", "hf_token"]
PLAIN_SECRET = "Tr0ub4dor-and-3"  # shaped like nothing: only its name says what it is
# what a credential-named variable may hold: nothing, a flag, a reference to where the job runs, a file
NOT_LITERAL = ["", "0", "1", "false", "no", "$HF_TOKEN", "${HF_TOKEN}", "$(HF_TOKEN)", "/run/secrets/hf-token",
               "~/.netrc"]
# named like a credential at a glance, and not one
NOT_CREDENTIALS = {"TOKENIZERS_PARALLELISM": "false", "SORT_KEY": "loss", "NCCL_IB_PKEY": "7", "SSH_PUBLIC_KEY":
                   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOk", "HF_TOKEN_PATH": "/run/secrets/hf", "PAD_TOKEN": "<pad>",
                   "MAX_NEW_TOKENS": "512", "HF_HUB_ENABLE_HF_TRANSFER": "1", "KEY": "label"}


def write_spec(root: Path, extra: dict, name: str = "leak") -> Path:
    """A spec that compiles (code folder and all) with ``extra`` written over its top-level fields."""
    (root / "code").mkdir(exist_ok=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    fields = {"version": 1, "name": name, "code": "code", "command": "python train.py",
              "resources": {"nodes": 1, "gpus_per_node": 1, "sku": "Standard_NC24ads_A100_v4"},
              "environment": {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"}}
    fields.update(extra)
    spec = root / "spec.yaml"
    spec.write_text("".join(f"{key}: {flow(value)}\n" for key, value in fields.items()))
    return spec


def line_of(spec: Path, key: str) -> int:
    return next(i for i, line in enumerate(spec.read_text().splitlines(), 1) if line.startswith(f"{key}:"))


def never_printed(secret: str, *outputs: str) -> None:
    for text in outputs:
        assert secret not in text, text
        assert json.dumps(secret)[1:-1] not in text, text  # nor escaped, as json writes it


def refused(tmp_path, spec: Path, field: str, words: str, secret: str) -> None:
    """validate (text with and without --strict, json with it, github without) and compile refuse the spec
    with one located error at ``field``, and print nothing of ``secret``; compile writes nothing."""
    for strict in ([], ["--strict"]):
        proc = ts("validate", *strict, spec.name, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        never_printed(secret, proc.stdout, proc.stderr)
        found = [m for m in map(LOCATED.match, proc.stderr.splitlines()) if m and m["field"] == field]
        assert len(found) == 1, proc.stderr
        assert words in found[0]["message"] and "Key Vault" in found[0]["hint"], found[0].group(0)
        assert int(found[0]["line"]) == line_of(spec, field.split(".")[0]), found[0].group(0)  # its own line
        fmt = "json" if strict else "github"
        proc = ts("validate", *strict, "--format", fmt, spec.name, cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        never_printed(secret, proc.stdout, proc.stderr)
        if fmt == "json":
            problems = [d for d in json.loads(proc.stdout) if d["field"] == field]
            assert len(problems) == 1 and problems[0]["line"] == int(found[0]["line"]), proc.stdout
        else:
            assert f"line={found[0]['line']}," in proc.stdout and f"title={field}::" in proc.stdout, proc.stdout
    proc = ts("compile", spec.name, "-o", "out", "-t", "azureml", "-t", "slurm", "-t", "kubernetes", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    never_printed(secret, proc.stdout, proc.stderr)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


# --- the spec: refused at the value's line ----------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(SHAPED))
def test_a_token_shaped_env_value_is_an_error_at_its_line_and_never_printed(tmp_path, kind):
    words, value, secret = SHAPED[kind]
    spec = write_spec(tmp_path, {"env": {"MODEL_SOURCE": value, "NCCL_DEBUG": "WARN"}})
    refused(tmp_path, spec, "env.MODEL_SOURCE", words, secret)


def test_a_token_shaped_env_key_is_refused_without_quoting_it(tmp_path):
    # a token pasted as the name: masked like a value, `env.<redacted>` at its own line
    words, value, secret = SHAPED["github"]
    spec = write_spec(tmp_path, {"env": {value: "1", "NCCL_DEBUG": "WARN"}})
    refused(tmp_path, spec, "env.<redacted>", words, secret)


@pytest.mark.parametrize("name", NAMED)
def test_a_credential_named_variable_with_a_literal_value_is_an_error_naming_it(tmp_path, name):
    spec = write_spec(tmp_path, {"env": {name: PLAIN_SECRET}})
    refused(tmp_path, spec, f"env.{name}", f"{name} is named like a credential", PLAIN_SECRET)


@pytest.mark.parametrize("field", ["command", "description", "vars", "inputs", "inputs-short", "targets"])
def test_a_token_anywhere_else_in_the_spec_is_an_error_at_that_field(tmp_path, field):
    words, value, secret = SHAPED["hugging-face"]
    extra, where = {
        "command": ({"command": f"python train.py --hub-token {value}"}, "command"),
        "description": ({"description": f"pushes with {value}"}, "description"),
        "vars": ({"vars": {"hub": value}, "command": "python train.py --hub {{ vars.hub }}"}, "vars.hub"),
        "inputs": ({"inputs": {"hub": {"value": value}}}, "inputs.hub.value"),
        "inputs-short": ({"inputs": {"hub": value}}, "inputs.hub"),
        "targets": ({"targets": {"kubernetes": {"namespace": "ml", "node_selector": {"pool": value}}}},
                    "targets.kubernetes.node_selector.pool"),
    }[field]
    refused(tmp_path, write_spec(tmp_path, extra), where, words, secret)


@pytest.mark.parametrize("field", ["env", "command", "description"])
def test_a_token_a_template_assembles_is_an_error_and_never_printed(tmp_path, field):
    """Issue 40: `{{ vars.p }}{{ vars.q }}` -- two pieces, neither shaped like a token -- was compiled
    into the job unscanned (the scan read the spec's strings, not what they render to). It is
    refused at the templated field as a written token is, and never printed whole."""
    words, value, secret = SHAPED["hugging-face"]
    pieces = {"vars": {"p": value[:12], "q": value[12:]}}
    assert not secrets.secrets_in(pieces)  # neither piece alone looks like anything
    extra, where = {
        "env": ({"env": {"MODEL_SOURCE": "{{ vars.p }}{{ vars.q }}"}}, "env.MODEL_SOURCE"),
        "command": ({"command": "python train.py --hub {{ vars.p ~ vars.q }}"}, "command"),
        "description": ({"description": "{% for x in [vars.p, vars.q] %}{{ x }}{% endfor %}"}, "description"),
    }[field]
    spec = write_spec(tmp_path, {**pieces, **extra})
    refused(tmp_path, spec, where, words, secret)
    proc = ts("validate", spec.name, cwd=tmp_path)
    assert f"{where}: renders to what looks like a Hugging Face token" in proc.stderr, proc.stderr


def test_credential_named_template_variables_and_inputs_are_refused_too(tmp_path):
    spec = write_spec(tmp_path, {"vars": {"api_key": PLAIN_SECRET}, "inputs": {"db_password": {"value": PLAIN_SECRET}}})
    proc = ts("validate", spec.name, cwd=tmp_path)
    assert proc.returncode == 1
    never_printed(PLAIN_SECRET, proc.stdout, proc.stderr)
    assert "error: vars.api_key: api_key is named like a credential (*_KEY)" in proc.stderr, proc.stderr
    assert "error: inputs.db_password.value: db_password is named like a credential (*PASSWORD*)" in proc.stderr


def test_every_secret_in_a_spec_is_reported_in_one_run_beside_its_other_errors(tmp_path):
    spec = write_spec(tmp_path, {"env": {"HF_TOKEN": SHAPED["hugging-face"][1], "DB_PASSWORD": PLAIN_SECRET},
                                 "description": SHAPED["jwt"][1], "resources": {"nodes": 0, "gpus_per_node": 1}})
    proc = ts("validate", spec.name, cwd=tmp_path)
    assert proc.returncode == 1
    fields = [m["field"] for m in map(LOCATED.match, proc.stderr.splitlines()) if m]
    assert {"env.HF_TOKEN", "env.DB_PASSWORD", "description"} <= set(fields), proc.stderr
    assert "resources" in proc.stderr  # the spec's other problem, in the same run
    never_printed(PLAIN_SECRET, proc.stderr)
    for kind in ("hugging-face", "jwt"):
        never_printed(SHAPED[kind][2], proc.stderr)


def test_a_message_that_quotes_a_value_never_quotes_a_token(tmp_path):
    """Messages that quote what the spec says (a wrong type, a bad name, an override's label)
    quote a credential as <redacted>, and the credential's own error is there."""
    words, value, secret = SHAPED["github"]
    spec = write_spec(tmp_path, {"resources": {"nodes": value, "gpus_per_node": 1},
                                 "environment": {"azureml": f"azureml:{value}"}})
    proc = ts("validate", spec.name, "--set", f"env.DEPLOY_TOKEN={PLAIN_SECRET}", "--var", f"x={value}", cwd=tmp_path)
    assert proc.returncode == 1
    never_printed(secret, proc.stderr)
    never_printed(PLAIN_SECRET, proc.stderr)
    assert "error: resources.nodes: holds what looks like a GitHub token" in proc.stderr, proc.stderr
    assert "--set env.DEPLOY_TOKEN=<redacted>: error: env.DEPLOY_TOKEN: DEPLOY_TOKEN is named like" in proc.stderr
    # any diagnostic: the one place every message goes through
    quoted = error(("x",), f"'{value}' is not a valid name", f"not {value}")
    assert secret not in quoted.render() and secret not in (quoted.message + quoted.hint)


def test_values_that_hold_no_credential_and_names_that_are_not_credentials_validate(tmp_path):
    env = {f"HF_TOKEN_{i}" if i else "HF_TOKEN": value for i, value in enumerate(NOT_LITERAL)}
    env.update(NOT_CREDENTIALS)
    spec = write_spec(tmp_path, {"env": env, "vars": {"sort_key": "loss", "tokenizer": "gpt2"},
                                 "description": "fine-tunes sk-learn-style heads; see https://github.com/org/repo@v1"})
    proc = ts("validate", "--strict", spec.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_the_example_specs_test_specs_and_bases_raise_no_credential_error():
    proc = ts("validate", "specs/", "tests/specs/", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "credential" not in proc.stderr and "looks like" not in proc.stderr
    for path in sorted((REPO / "bases").glob("*.yaml")) + sorted((REPO / "tests" / "bad_specs").glob("*.yaml")):
        try:
            data = load_bytes(path.read_bytes(), str(path)).data
        except SpecError:
            continue  # a bad spec that is not YAML
        assert secrets.secrets_in(data) == [], path


PUBLIC = REPO.parent / "shared" / "reference" / "azureml-jobs-public"


@pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"the public jobs are read from {PUBLIC}, not copied here")
def test_the_public_azure_ml_jobs_import_without_a_credential_error(tmp_path):
    jobs = sorted(p.name for p in PUBLIC.iterdir() if (p / "job" / f"{p.name}.yml").is_file())
    assert len(jobs) == 10
    for name in jobs:
        shutil.copytree(PUBLIC / name, tmp_path / name)
        job = tmp_path / name / "job" / f"{name}.yml"
        assert secrets.secrets_in(YAML(typ="safe").load(job.read_text())) == [], name
        proc = ts("import", str(job.relative_to(tmp_path)), "-o", f"specs/{name}.yaml", cwd=tmp_path)
        assert "credential" not in proc.stderr and "looks like" not in proc.stderr, proc.stderr
        spec = tmp_path / "specs" / f"{name}.yaml"
        if spec.exists():
            assert secrets.secrets_in(YAML(typ="safe").load(spec.read_text())) == [], name


# --- the review: nothing of a secret is printed -------------------------------------------------------

def review_repo(tmp_path: Path, secret_env: dict) -> Path:
    """A repository whose main branch holds a spec with ``secret_env`` in its env and a committed
    output holding the same (written by an older trainspec, or by hand), then a working tree that
    takes the secret out of both."""
    root = tmp_path / "repo"
    root.mkdir()
    spec = write_spec(root, {"env": {"NCCL_DEBUG": "WARN"}, "targets": {"azureml": {}, "kubernetes": {"namespace": "ml"}}})
    git("init", "-q", "-b", "main", cwd=root)
    ts("compile", "spec.yaml", "-o", "build", cwd=root, check=True)
    clean = {path: path.read_text() for path in (root / "build").rglob("*") if path.is_file()}
    job_yml = root / "build" / "leak" / "azureml" / "job.yml"
    job_yaml = root / "build" / "leak" / "kubernetes" / "job.yaml"
    spec.write_text(spec.read_text().replace('"NCCL_DEBUG": "WARN"', f'"NCCL_DEBUG": "WARN", {flow(secret_env)[1:-1]}'))
    lines = "".join(f"  {k}: {flow(v)}\n" for k, v in secret_env.items())
    job_yml.write_text(job_yml.read_text().replace("environment_variables:\n", "environment_variables:\n" + lines))
    pairs = "".join(f"    - name: {k}\n      value: {flow(v)}\n" for k, v in secret_env.items())
    assert "    - name: NCCL_DEBUG\n" in job_yaml.read_text()
    job_yaml.write_text(job_yaml.read_text().replace("    - name: NCCL_DEBUG\n", pairs + "    - name: NCCL_DEBUG\n", 1))
    git("add", "-A", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a spec with a token", cwd=root)
    # the fix: the spec without it, the outputs as they were
    spec.write_text(spec.read_text().replace(f", {flow(secret_env)[1:-1]}", ""))
    for path, text in clean.items():
        path.write_text(text)
    return root


def review_outputs(root: Path):
    for command in ("plan", "diff"):
        for fmt in ("text", "json", "markdown"):
            proc = ts(command, "--git", "main", "--format", fmt, cwd=root)
            assert proc.returncode == 0, proc.stderr
            yield f"{command} {fmt}", proc


@pytest.mark.parametrize("env", [{"HF_TOKEN": SHAPED["hugging-face"][1]}, {"DB_PASSWORD": PLAIN_SECRET}],
                         ids=["shaped", "named"])
def test_plan_and_diff_never_print_a_secret_the_base_revision_holds(tmp_path, env):
    root = review_repo(tmp_path, env)
    (value,) = env.values()
    secret = SHAPED["hugging-face"][2] if value.startswith("hf_") else PLAIN_SECRET
    seen = ""
    for what, proc in review_outputs(root):
        never_printed(secret, proc.stdout, proc.stderr)
        seen += proc.stdout + proc.stderr
    # the base did not compile: the reviewer is told so, at the secret's line, without it
    assert "note: (at the base revision) env." in seen and "leak" in seen


def test_check_never_prints_a_secret_a_committed_output_holds(tmp_path):
    """A committed output with a token in it (an older trainspec compiled it, or a hand edit):
    check fails on it and shows its diff with the token and the credential-named values redacted."""
    root = review_repo(tmp_path, {"HF_TOKEN": SHAPED["hugging-face"][1], "DB_PASSWORD": PLAIN_SECRET})
    git("checkout", "-q", "--", "build", cwd=root)  # the committed outputs with the secrets, the fixed spec
    proc = ts("check", "spec.yaml", "-o", "build", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "job.yml" in proc.stdout and "job.yaml" in proc.stdout, proc.stdout
    assert "<redacted>" in proc.stdout, proc.stdout
    for secret in (SHAPED["hugging-face"][2], PLAIN_SECRET):
        never_printed(secret, proc.stdout, proc.stderr)


# --- the redaction itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "export DB_PASSWORD={v}\n", "export DB_PASSWORD='{v} x'\n", "  DB_PASSWORD: {v}\n", '  "DB_PASSWORD": "{v}",\n',
    "    - name: DB_PASSWORD\n      value: {v}\n", "<Name>DB_PASSWORD</Name>\n  <Value>{v}</Value>",
    "rank 0: DB_PASSWORD={v} NCCL_DEBUG=WARN", "--set env.DB_PASSWORD={v}",
])
def test_the_values_of_credential_named_variables_are_redacted_in_every_output_format(text):
    shown = secrets.redact(text.format(v=PLAIN_SECRET))
    assert PLAIN_SECRET not in shown and "<redacted>" in shown and "DB_PASSWORD" in shown


def test_redaction_leaves_what_holds_no_credential_alone():
    for path in sorted((REPO / "tests" / "golden").rglob("*")):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert secrets.redact(text) == text, path
    for text in ("HF_TOKEN=", "HF_TOKEN: ''", "HF_TOKEN=$HF_TOKEN", "SORT_KEY=loss", "key: sku", "sort(key=len)"):
        assert secrets.redact(text) == text
    assert secrets.redact_value("env.HF_TOKEN", "0") == "0"
    assert secrets.redact_value("env.HF_TOKEN", PLAIN_SECRET) == "<redacted>"
    assert secrets.redact_value(None, {"first": {"WANDB_API_KEY": PLAIN_SECRET, "RANK": "0"}}) == \
        {"first": {"WANDB_API_KEY": "<redacted>", "RANK": "0"}}


def test_diff_never_prints_a_secret_a_hand_edited_committed_output_holds(tmp_path):
    """A pull request that edits a committed output by hand, putting a token in it: the review
    shows the edit as a hunk (what CI would submit), with the token and the credential-named
    value redacted."""
    root = tmp_path / "repo"
    root.mkdir()
    write_spec(root, {"env": {"NCCL_DEBUG": "WARN"}})
    git("init", "-q", "-b", "main", cwd=root)
    ts("compile", "spec.yaml", "-o", "build", cwd=root, check=True)
    git("add", "-A", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a job", cwd=root)
    job = root / "build" / "leak" / "azureml" / "job.yml"
    job.write_text(job.read_text().replace("environment_variables:\n", "environment_variables:\n  HF_TOKEN: "
                                           + SHAPED["hugging-face"][1] + f"\n  DB_PASSWORD: {PLAIN_SECRET}\n"))
    shown = ""
    for fmt in ("text", "json", "markdown"):
        proc = ts("diff", "--git", "main", "--format", fmt, cwd=root)
        assert proc.returncode == 0, proc.stderr
        for secret in (SHAPED["hugging-face"][2], PLAIN_SECRET):
            never_printed(secret, proc.stdout, proc.stderr)
        shown += proc.stdout
    assert "job.yml" in shown and "+  HF_TOKEN: <redacted>" in shown and "+  DB_PASSWORD: <redacted>" in shown, shown


def test_the_marks_that_skip_a_shape_never_change_what_is_found():
    """credential_kind and redact look only for the shapes whose mark (``hf_``, ``eyJ``, ``://``...)
    is in the text: each kind's examples, alone, inside noise and in upper and lower case, are
    found and redacted exactly as by every shape at once."""
    import random

    every = secrets._compiled()
    rng = random.Random(27)
    noise = "abc XYZ 0123 _-/:=+.;?&@\n"
    texts = []
    for _, value, _ in SHAPED.values():
        for _ in range(5):
            left = "".join(rng.choice(noise) for _ in range(rng.randrange(30)))
            right = "".join(rng.choice(noise) for _ in range(rng.randrange(30)))
            texts += [left + value + right, (left + value + right).lower(), (left + value + right).upper()]
    for text in texts:
        full = every.search(text)
        assert secrets.credential_kind(text) == (secrets.SHAPES[int(full.lastgroup[1:])][0] if full else None), text
        assert secrets.redact_shapes(text) == every.sub(secrets.REDACTED, text), text
