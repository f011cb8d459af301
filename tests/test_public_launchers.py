"""Issue 41: two public jobs (../shared/reference/jobs-public, verbatim, never copied here) whose
launch lines trainspec refused, written as specs and compiled to all five targets.

- kubernetes/fast-llm-pytorchjob.yaml: `torchrun ... --no_python fast-llm train gpt`, a console
  script per worker. Per node trainspec writes the torchrun line itself, so the spec's command is
  the program (`fast-llm train gpt ...`); it was refused for not starting with `python`.
- slurm/accelerate-multinode.sh: `accelerate launch --rdzv_backend c10d --main_process_ip
  $head_node_ip ...` with no `--machine_rank`: the c10d rendezvous assigns node ranks. Refused
  because a command that expands `$...` had to write --machine_rank itself.
"""

import pytest

from conftest import REPO
from trainspec.registry.build import build

PUBLIC = REPO.parent / "shared" / "reference" / "jobs-public"
if not PUBLIC.is_dir():
    pytest.skip(f"the public jobs are read from {PUBLIC} (shared/ beside the clone), not copied here",
                allow_module_level=True)

TARGETS = ("azureml", "hpcpack", "kubernetes", "ray", "slurm")
SETTINGS = """targets:
  azureml: {compute: gpu-cluster}
  hpcpack: {shared_dir: /shared/hpcpack}
  kubernetes: {namespace: ml}
  ray: {location: eastus, resource_group: rg}
  slurm: {partition: gpu}
"""
# the spec each job's launch line becomes: (public file, what the file says, spec)
JOBS = {
    "fast-llm": ("kubernetes/fast-llm-pytorchjob.yaml", ["--no_python \\\n", "fast-llm train gpt \\\n"], """\
version: 1
name: fast-llm
code: code
command: fast-llm train gpt --config examples/mistral.yaml
framework: pytorch
resources: {nodes: 4, sku: Standard_ND96isr_H100_v5}
distribution: {launcher: per-node}
environment: {image: "ghcr.io/servicenow/fast-llm:latest"}
env: {NCCL_DEBUG: INFO, PYTHONHASHSEED: "0"}
"""),
    "accelerate-c10d": ("slurm/accelerate-multinode.sh", ["--rdzv_backend c10d \\\n"], """\
version: 1
name: accelerate-c10d
code: code
command: >-
  accelerate launch --num_processes {{ world_size }} --num_machines {{ nodes }} --rdzv_backend c10d
  --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT
  examples/complete_nlp_example.py --mixed_precision fp16 --output_dir examples/output
framework: pytorch
resources: {nodes: 4, sku: Standard_NC96ads_A100_v4}
distribution: {launcher: per-node}
environment: {image: "nvcr.io/nvidia/pytorch:24.08-py3"}
"""),
}
# what every target's compiled job runs per node
RUNS = {"fast-llm": "--no-python fast-llm train gpt --config examples/mistral.yaml",
        "accelerate-c10d": "accelerate launch --num_processes 16 --num_machines 4 --rdzv_backend c10d"}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_public_launch_line_as_a_spec_compiles_to_every_target(tmp_path, name):
    public, said, spec_text = JOBS[name]
    text = (PUBLIC / public).read_text()
    assert all(words in text for words in said) and "--machine_rank" not in text  # the job as published
    (tmp_path / "code").mkdir()
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(spec_text + SETTINGS)
    outcome = build(str(spec), tmp_path / "out", list(TARGETS))
    assert [d.render() for d in outcome.diagnostics if d.is_error] == []
    for artifact in outcome.artifacts:  # the job file and scripts, not the runtime
        job = "\n".join(f.data.decode() for f in artifact.files if f.runtime is None)
        assert RUNS[name] in job.replace("\\\n", ""), artifact.target
    assert sorted(a.target for a in outcome.artifacts) == list(TARGETS)


def test_a_deepspeed_launcher_that_starts_each_node_alone_is_an_error_at_the_command(tmp_path):
    """`--deepspeed_multinode_launcher pdsh` (or nossh, ...) per node on 2 nodes: each node's
    accelerate would run DeepSpeed's own multi-node launch; the shim refuses it at start, and
    compile says it first, at the line, on every target."""
    (tmp_path / "code").mkdir()
    spec = tmp_path / "pdsh.yaml"
    spec.write_text("""version: 1
name: pdsh
code: code
command: accelerate launch --use_deepspeed --deepspeed_multinode_launcher=pdsh train.py
framework: pytorch
resources: {nodes: 2, sku: Standard_ND96isr_H100_v5}
distribution: {launcher: per-node}
environment: {image: "nvcr.io/nvidia/pytorch:24.08-py3"}
""" + SETTINGS)
    outcome = build(str(spec), tmp_path / "out", list(TARGETS))
    errors = [d.render() for d in outcome.diagnostics if d.is_error]
    assert len(errors) == len(TARGETS) and outcome.artifacts == [], errors
    for target, message in zip(TARGETS, errors):  # sorted by line, then in the order the targets were checked
        assert f":4:10: error: command: --deepspeed_multinode_launcher pdsh: per node on {target} every node" in message
        assert "(hint: remove the flag (trainspec passes --deepspeed_multinode_launcher standard)" in message
    spec.write_text(spec.read_text().replace("=pdsh", "=standard"))
    assert [d for d in build(str(spec), tmp_path / "out", list(TARGETS)).diagnostics if d.is_error] == []
