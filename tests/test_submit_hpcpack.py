"""`trainspec submit/status/logs/cancel -t hpcpack` against a fake head node: a loopback HTTPS
server (a self-signed certificate made here, trusted through HPCPACK_CA_BUNDLE) that speaks the
REST web service's documented operations (Create Job From XML, Submit Job, Get Job, Get Job List
with its continuation, Get Task List, Cancel Job), checks Basic authentication and the
api-version header, and walks each job through a scripted sequence of HPC Pack job states. The
real command line runs in a subprocess; the tasks' "nodes" write their logs where StdOutFilePath
says, on a shared folder that is a temporary directory here."""

import base64
import datetime
import ipaddress
import os
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import REPO, copy_examples, example_specs

USER, PASSWORD = "CONTOSO\\alice", "s3cret-pass"
SCHED = "{http://schemas.microsoft.com/HPCS2008R2/scheduler/}"
COMMON = "http://schemas.microsoft.com/HPCS2008R2/common"
PAGE = 2  # the fake lists two jobs a page, so find follows x-ms-continuation-queryId


# --- the fake head node ------------------------------------------------------------------------

class FakeHead:
    """The REST service's state: jobs by id, each with the states it will pass through."""

    def __init__(self, shared: Path):
        self.shared = shared
        self.lock = threading.Lock()
        self.jobs = {}
        self.next_id = 100
        self.plan = ["Queued", "Running", "Running", "Finished"]  # for the next submitted job
        self.error_message = ""
        self.calls = []  # (method, path)

    def add_old_jobs(self, count: int):
        """Other users' jobs, finished, so the list has pages."""
        for _ in range(count):
            self.jobs[self.next_id] = {"name": f"other-{self.next_id}", "states": ["Finished"], "at": 0,
                                       "tasks": [], "error": "", "xml": b""}
            self.next_id += 1

    def state(self, job) -> str:
        return job["states"][min(job["at"], len(job["states"]) - 1)]

    def advance(self, id: int, job):
        """One Get Job later: the next state; a job moving into Running has its nodes write a line each."""
        if job["at"] >= len(job["states"]) - 1:
            return
        job["at"] += 1
        if self.state(job) == "Running":
            for task in job["tasks"]:
                path = self.node_path(task["out"].replace("$CCP_JOBID", str(id)))
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as handle:
                    handle.write(f"{task['name']} says step {job['at']}\n")

    def node_path(self, path: str) -> Path:
        assert path.startswith("/app/"), path
        return self.shared / path[len("/app/"):]


def properties(items) -> bytes:
    root = ET.Element("ArrayOfProperty", xmlns=COMMON)
    for name, value in items:
        prop = ET.SubElement(root, "Property")
        ET.SubElement(prop, "Name").text = name
        ET.SubElement(prop, "Value").text = value
    return ET.tostring(root)


def objects(rows) -> bytes:
    root = ET.Element("ArrayOfObject", xmlns=COMMON)
    for row in rows:
        props = ET.SubElement(ET.SubElement(root, "Object"), "Properties")
        for name, value in row:
            prop = ET.SubElement(props, "Property")
            ET.SubElement(prop, "Name").text = name
            ET.SubElement(prop, "Value").text = value
    return ET.tostring(root)


def fault(message: str) -> bytes:
    return (f'<HpcWebServiceFault xmlns="{COMMON}"><Code>267386880</Code><Message>{message}</Message>'
            "</HpcWebServiceFault>").encode()


class Handler(BaseHTTPRequestHandler):
    head: FakeHead = None

    def log_message(self, *args):  # quiet
        pass

    def reply(self, code: int, body: bytes, headers=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.handle_call("GET")

    def do_POST(self):
        self.handle_call("POST")

    def handle_call(self, method: str):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            return self.reply(401, b"<html><body>401 - Unauthorized: Access is denied</body></html>")
        if self.headers.get("api-version") != "2012-11-01.4.0":
            return self.reply(400, fault("api-version missing"))
        parts = url.path.split("/")[2:]  # /WindowsHPC/...
        head = self.head
        with head.lock:
            head.calls.append((method, "/".join(parts)))
            if method == "POST" and parts == ["Jobs", "JobFile"]:
                return self.create(body)
            if len(parts) >= 2 and parts[0] == "Job":
                job = head.jobs.get(int(parts[1])) if parts[1].isdigit() else None
                if job is None:
                    return self.reply(404, fault(f"The job {parts[1]} does not exist."))
                return self.job_call(method, int(parts[1]), job, parts[2:], query, body)
            if method == "GET" and parts == ["Jobs"]:
                return self.job_list(query)
        return self.reply(404, fault("no such operation"))

    def create(self, body: bytes):
        head = self.head
        root = ET.fromstring(body)
        if root.get("Name") is None or root.find(f"{SCHED}Tasks") is None:
            return self.reply(400, fault("The job XML is not valid."))
        tasks = [{"name": t.get("Name"), "out": t.get("StdOutFilePath")} for t in root.iter(f"{SCHED}Task")]
        custom = [(t.findtext(f"{SCHED}Name"), t.findtext(f"{SCHED}Value"))
                  for t in root.findall(f"{SCHED}CustomProperties/{SCHED}Term")]
        id = head.next_id
        head.next_id += 1
        head.jobs[id] = {"name": root.get("Name"), "states": ["Configuring"], "at": 0, "tasks": tasks,
                         "error": "", "xml": body, "custom": custom}
        return self.reply(200, f'<int xmlns="http://schemas.microsoft.com/2003/10/Serialization/">{id}</int>'.encode())

    def job_call(self, method, id, job, rest, query, body):
        head = self.head
        if method == "POST" and rest == ["Submit"]:
            if ET.fromstring(body).tag != f"{{{COMMON}}}ArrayOfProperty":
                return self.reply(400, fault("The request body is not an ArrayOfProperty."))
            job["states"], job["at"], job["error"] = list(head.plan), 0, head.error_message
            return self.reply(200, b"")
        if method == "POST" and rest == ["Cancel"]:
            if head.state(job) in ("Finished", "Failed", "Canceled"):
                return self.reply(400, fault("The job cannot be canceled in its current state."))
            job["states"], job["at"] = ["Canceling", "Canceled"], 0
            return self.reply(200, b"")
        if method == "GET" and rest == []:
            wanted = query.get("Properties", "Id,Name,State").split(",")
            values = {"Id": str(id), "Name": job["name"], "State": head.state(job), "ErrorMessage": job["error"]}
            reply = properties([(k, values[k]) for k in wanted])
            if "State" in wanted:
                head.advance(id, job)
            return self.reply(200, reply)
        if method == "GET" and rest == ["CustomProperties"]:  # Get Job Custom Properties: every one
            return self.reply(200, properties(job.get("custom", [])))
        if method == "GET" and rest == ["Tasks"]:
            state = head.state(job)
            rows = []
            for i, task in enumerate(job["tasks"]):
                task_state = state if state in ("Finished", "Failed", "Canceled", "Running") else "Queued"
                rows.append([("TaskId", str(i + 1)), ("Name", task["name"]), ("State", task_state),
                             ("StdOutFilePath", task["out"]), ("Output", "")])
            return self.reply(200, objects(rows))
        return self.reply(404, fault("no such operation"))

    def job_list(self, query):
        head = self.head
        ids = sorted(head.jobs)
        start = int(query.get("QueryId", "0"))
        page = ids[start:start + PAGE]
        rows = [[("Id", str(i)), ("Name", head.jobs[i]["name"]), ("State", head.state(head.jobs[i]))] for i in page]
        more = [("x-ms-continuation-queryId", str(start + PAGE))] if start + PAGE < len(ids) else []
        return self.reply(200, objects(rows), more)


def self_signed(folder: Path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-head-node")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "head.pem", folder / "head.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def head(tmp_path):
    """The fake head node on 127.0.0.1, HTTPS; stopped when the test ends."""
    import ssl

    shared = tmp_path / "shared"
    shared.mkdir()
    cert, key = self_signed(tmp_path)
    state = FakeHead(shared)
    handler = type("BoundHandler", (Handler,), {"head": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"https://127.0.0.1:{server.server_address[1]}"
    state.cert = cert
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- the command line --------------------------------------------------------------------------

def write_spec(tmp_path: Path, name: str = "ddp-fake", nodes: int = 2) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('training')\n")
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""version: 1
name: {name}
code: code
command: python train.py --steps 3
framework: pytorch
resources: {{nodes: {nodes}, gpus_per_node: 1}}
targets:
  hpcpack:
    shared_dir: /app
    node_group: LinuxNodes
    python: /usr/bin/python3
""")
    return spec


def environment(head, tmp_path, **changes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPACK_")}
    env.update(PYTHONPATH=str(REPO), TRAINSPEC_POLL_SECONDS="0.2", HPCPACK_USERNAME=USER,
               HPCPACK_PASSWORD=PASSWORD, TRAINSPEC_SHARED_DIR=str(tmp_path / "shared"))
    if head is not None:
        env.update(HPCPACK_REST_URL=head.url, HPCPACK_CA_BUNDLE=str(head.cert))
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def trainspec(tmp_path, env, *args):
    """This worktree's trainspec, as a user runs it, bounded."""
    return subprocess.run([sys.executable, "-m", "trainspec.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def submitted_names(head):
    return [ET.fromstring(job["xml"]).get("Name") for job in head.jobs.values() if job["xml"]]


# --- the tests ---------------------------------------------------------------------------------

def test_submit_follows_to_finished_and_a_second_submit_finds_it(head, tmp_path):
    head.add_old_jobs(3)  # the list spans pages: find follows the continuation
    spec = write_spec(tmp_path)
    env = environment(head, tmp_path)
    first = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack", "--follow", "--max-wait", "60s")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "submitted (103); watch: job view 103 /scheduler:127.0.0.1" in first.stdout
    assert "node-0 says step" in first.stdout and "node-1 says" not in first.stdout  # rank 0 by default
    assert "completed (Finished)" in first.stdout
    # the job created from job.xml named after the digest, staged on the shared folder under that name
    [name] = submitted_names(head)
    assert name.startswith("ddp-fake-") and len(name) == len("ddp-fake-") + 10
    assert (tmp_path / "shared" / name / "code" / "train.py").is_file()
    assert ("POST", "Job/103/Submit") in head.calls
    assert PASSWORD not in first.stdout + first.stderr

    again = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack", "--wait", "--max-wait", "60s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already submitted (103), not submitted again" in again.stdout
    assert [c for c in head.calls if c == ("POST", "Jobs/JobFile")] == [("POST", "Jobs/JobFile")]

    logs = trainspec(tmp_path, env, "logs", spec.name, "-t", "hpcpack", "--all-ranks")
    assert logs.returncode == 0, logs.stderr
    assert "[node 0] node-0 says step" in logs.stdout and "[node 1] node-1 says step" in logs.stdout

    by_id = trainspec(tmp_path, env, "logs", "-t", "hpcpack", "--id", "103")  # no spec: the shared folder from the log's path
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.splitlines() == ["node-0 says step 1", "node-0 says step 2"]

    status = trainspec(tmp_path, env, "status", "-t", "hpcpack", "--id", "103")
    assert status.returncode == 0, status.stderr
    assert f"{name} on hpcpack: completed (Finished) (103)" in status.stdout


def test_a_failed_job_exits_4_with_the_schedulers_message(head, tmp_path):
    head.plan = ["Queued", "Running", "Failed"]
    head.error_message = "Task node-0 failed with exit code 1."
    env = environment(head, tmp_path)
    proc = trainspec(tmp_path, env, "submit", write_spec(tmp_path).name, "-t", "hpcpack", "--wait",
                     "--max-wait", "60s")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "failed (Failed: Task node-0 failed with exit code 1.), exit 4" in proc.stdout


def test_cancel_then_the_job_ends_canceled_exit_5(head, tmp_path):
    head.plan = ["Queued"]  # waits for nodes that never come
    spec = write_spec(tmp_path)
    env = environment(head, tmp_path)
    proc = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted (100)" in proc.stdout

    cancel = trainspec(tmp_path, env, "cancel", spec.name, "-t", "hpcpack")
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert "cancel requested (100)" in cancel.stdout
    assert ("POST", "Job/100/Cancel") in head.calls

    status = trainspec(tmp_path, env, "status", "-t", "hpcpack", "--id", "100", "--wait", "--max-wait", "30s")
    assert status.returncode == 5, status.stdout + status.stderr
    assert "canceled (Canceled)" in status.stdout


def test_logs_are_read_only_in_the_jobs_own_log_folder_and_never_through_a_link(head, tmp_path):
    # the head node answers with the log's path: one outside the job's log folder is refused, and a
    # log the job replaced with a link (to /proc/self/environ, to a secret here) is never followed
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("CI-SECRET-VALUE\n")
    spec = write_spec(tmp_path)
    env = environment(head, tmp_path)
    done = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack", "--wait", "--max-wait", "60s")
    assert done.returncode == 0, done.stdout + done.stderr
    task = head.jobs[100]["tasks"][0]
    log, task["out"] = task["out"], str(secret)
    outside = trainspec(tmp_path, env, "logs", spec.name, "-t", "hpcpack")
    assert f"the head node names '{secret}' as the log of a task of job 100: that is not in the job's log folder " \
           "(/app/logs/ddp-fake/), not read" in outside.stderr, outside.stdout + outside.stderr
    task["out"] = "/app/logs/ddp-fake/../../../outside/secret.txt"  # below the shared folder, not in the job's
    dotted = trainspec(tmp_path, env, "logs", "-t", "hpcpack", "--id", "100")
    assert "that is not in the job's log folder" in dotted.stderr, dotted.stdout + dotted.stderr
    task["out"] = log
    node_log = head.node_path(log.replace("$CCP_JOBID", "100"))
    node_log.unlink()
    node_log.symlink_to(secret)
    linked = trainspec(tmp_path, env, "logs", spec.name, "-t", "hpcpack")
    assert "is reached through a symbolic link (the job replaced its log or its log folder with one): not followed" \
        in linked.stderr, linked.stdout + linked.stderr
    for proc in (outside, dotted, linked):
        assert "CI-SECRET-VALUE" not in proc.stdout + proc.stderr


def test_without_an_endpoint_submit_says_how_to_submit_by_hand(tmp_path):
    env = environment(None, tmp_path)
    proc = trainspec(tmp_path, env, "submit", write_spec(tmp_path).name, "-t", "hpcpack")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("trainspec: error:")]
    assert "--address https://HEAD" in line and "HPCPACK_REST_URL" in line
    assert "bash build/ddp-fake/hpcpack/stage.sh" in line and "job submit /jobfile:build/ddp-fake/hpcpack/job.xml" in line


def test_a_wrong_password_is_one_line_and_never_printed(head, tmp_path):
    env = environment(head, tmp_path, HPCPACK_PASSWORD="wrong-password-123")
    proc = trainspec(tmp_path, env, "submit", write_spec(tmp_path).name, "-t", "hpcpack", "--wait")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("trainspec: error:")]
    assert "refused the user name or password (401" in line and "HPCPACK_USERNAME" in line
    assert "wrong-password-123" not in proc.stdout + proc.stderr
    assert not head.jobs


def test_an_unreachable_head_node_or_an_untrusted_certificate_is_exit_3(head, tmp_path):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    spec = write_spec(tmp_path).name
    proc = trainspec(tmp_path, environment(head, tmp_path, HPCPACK_REST_URL=f"https://127.0.0.1:{closed}"),
                     "submit", spec, "-t", "hpcpack", "--wait")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"cannot reach the HPC Pack REST service at https://127.0.0.1:{closed}" in proc.stderr

    untrusted = trainspec(tmp_path, environment(head, tmp_path, HPCPACK_CA_BUNDLE=None), "submit", spec, "-t",
                          "hpcpack")
    assert untrusted.returncode == 3, untrusted.stdout + untrusted.stderr
    assert "TLS certificate is not trusted" in untrusted.stderr and "HPCPACK_CA_BUNDLE" in untrusted.stderr
    assert not head.jobs


def test_an_unknown_id_is_said_plainly(head, tmp_path):
    proc = trainspec(tmp_path, environment(head, tmp_path), "status", "-t", "hpcpack", "--id", "999")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no job 999 on the head node (404) (The job 999 does not exist.)" in proc.stderr


# --- in process: the mapping and the XML -----------------------------------------------------

def test_states_map_to_the_common_words():
    from trainspec.jobs.api import State
    from trainspec.targets.hpcpack.submit import state_of

    assert [state_of(w) for w in ("Configuring", "Submitted", "Validating", "ExternalValidation", "Queued")] \
        == [State.QUEUED] * 5
    assert [state_of(w) for w in ("Running", "Finishing", "Canceling")] == [State.RUNNING] * 3
    assert (state_of("Finished"), state_of("Failed"), state_of("Canceled")) == \
        (State.COMPLETED, State.FAILED, State.CANCELED)
    assert state_of("Canceled", "The job exceeded its run time limit.") == State.TIMED_OUT
    assert state_of("Failed", "Task failed with exit code 1") == State.FAILED


def test_the_name_is_set_through_the_xml_and_every_value_survives():
    from trainspec.targets.hpcpack.submit import named_job_xml

    original = ('<?xml version="1.0" encoding="utf-8"?>\n<!-- header -->\n'
                '<Job xmlns="http://schemas.microsoft.com/HPCS2008R2/scheduler/" Name="a&amp;b" Version="3.000">'
                '<Dependencies /><Tasks><Task Name="node-0" WorkDirectory="/app/a/code" '
                'CommandLine="echo &quot;x&#10;y&quot;"><EnvironmentVariables>'
                '<Variable><Name>K</Name><Value>a&#13;\nb &lt;c&gt;</Value></Variable>'
                '<Variable><Name>TRAINSPEC_STAGED_DIR</Name><Value>/app/a</Value></Variable>'
                '</EnvironmentVariables></Task></Tasks></Job>\n').encode()
    staged = '/app/x"<y>&-0123456789'  # the job's own folder, set through the XML: escaped, never spliced
    renamed = ET.fromstring(named_job_xml(original, 'x"<y>-0123456789', staged=staged))
    before = ET.fromstring(original)
    assert renamed.get("Name") == 'x"<y>-0123456789'
    task, old = renamed.find(f"{SCHED}Tasks/{SCHED}Task"), before.find(f"{SCHED}Tasks/{SCHED}Task")
    assert task.get("CommandLine") == old.get("CommandLine") == 'echo "x\ny"'
    values = [v.text for v in task.iter(f"{SCHED}Value")]
    assert values == ["a\r\nb <c>", staged]
    assert task.get("WorkDirectory") == staged + "/code"


def test_the_address_is_the_head_nodes_https_root():
    from trainspec.jobs.api import Context, SubmitError
    from trainspec.targets.hpcpack.submit import HPCPackScheduler

    def base(address):
        return HPCPackScheduler(Context(address=address, env={}))._base()

    assert base("head.contoso.com") == "https://head.contoso.com"
    assert base("https://head:8443/WindowsHPC/") == "https://head:8443"
    assert base("https://me:pw@head") == "https://head"  # never sent nor printed
    with pytest.raises(SubmitError, match="must be https://"):
        base("http://head")


def test_a_job_of_the_same_name_is_followed_only_with_this_jobs_digest(head, tmp_path):
    """The job carries its full digest as its custom property trainspec_digest (set in job.xml);
    a job of its name without it, created by any user of the cluster, is an error: stage.sh does
    not run, nothing is created."""
    from conftest import job_of

    spec = write_spec(tmp_path)
    name, digest = job_of(spec, "hpcpack")
    head.jobs[head.next_id] = {"name": name, "states": ["Queued"], "at": 0, "tasks": [], "error": "", "xml": b"",
                               "custom": []}
    head.next_id += 1
    env = environment(head, tmp_path)
    proc = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack", "--wait", "--max-wait", "60s")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"a job named {name} is already there (100; job view 100 /scheduler:127.0.0.1) but it is not this " \
           f"job: it carries no trainspec_digest, not {digest}; nothing submitted" in proc.stderr
    assert ("POST", "Jobs/JobFile") not in head.calls and list((tmp_path / "shared").iterdir()) == []
    del head.jobs[100]  # that job removed: this one is submitted with its digest, and found by it
    done = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack")
    assert done.returncode == 0, done.stdout + done.stderr
    [(key, value)] = head.jobs[101]["custom"]
    assert (key, value) == ("trainspec_digest", digest)
    again = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack")
    assert again.returncode == 0 and "already submitted (101)" in again.stdout, again.stdout + again.stderr


def test_a_queued_job_keeps_its_own_staged_folder_when_the_spec_and_its_code_change(head, tmp_path):
    """Submit stages the code, the shim and its election file under the job's own name,
    <shared_dir>/<job name>/, and the job it creates runs from there. A changed spec (another
    digest, another job) submitted while the first waits gets its own folder: the first job's is
    byte for byte what it was, and its tasks still start in it and run its shim."""
    head.plan = ["Queued"]  # both jobs wait in the queue
    spec = write_spec(tmp_path)
    env = environment(head, tmp_path)
    shared = tmp_path / "shared"

    def files(folder: Path):
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    first = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack")
    assert first.returncode == 0, first.stdout + first.stderr
    [first_name] = submitted_names(head)
    staged = files(shared / first_name)
    assert {"code/train.py", "trainspec_shim.py", "trainspec_hpcpack_election.py"} <= set(staged)

    (tmp_path / "code" / "train.py").write_text("print('edited after submit')\n")
    (tmp_path / "code" / "new.py").write_text("print('new')\n")
    spec.write_text(spec.read_text().replace("--steps 3", "--steps 4"))
    second = trainspec(tmp_path, env, "submit", spec.name, "-t", "hpcpack")
    assert second.returncode == 0, second.stdout + second.stderr
    first_name_again, second_name = submitted_names(head)
    assert first_name_again == first_name != second_name
    assert files(shared / first_name) == staged  # the queued job's copy, untouched
    assert (shared / second_name / "code" / "train.py").read_text() == "print('edited after submit')\n"
    assert not (shared / "ddp-fake").exists()  # nothing is staged under the spec's name

    for job in head.jobs.values():
        name = ET.fromstring(job["xml"]).get("Name")
        for task in ET.fromstring(job["xml"]).iter(f"{SCHED}Task"):
            assert task.get("WorkDirectory") == f"/app/{name}/code"
            variables = {v.findtext(f"{SCHED}Name"): v.findtext(f"{SCHED}Value")
                         for v in task.iter(f"{SCHED}Variable")}
            # the words the task's bash runs, expanded with the task's variables: the shim is the job's own
            words = subprocess.run(["bash", "-c", 'eval "set -- $LINE" && printf "%s\\n" "$@"'],
                                   env={**variables, "LINE": task.get("CommandLine"), "PATH": os.environ["PATH"]},
                                   capture_output=True, text=True, timeout=30).stdout.splitlines()
            assert words[:4] == ["/usr/bin/python3", "-I", "-S", f"/app/{name}/trainspec_shim.py"]
            assert head.node_path(words[3]).read_bytes() == files(shared / name)["trainspec_shim.py"]
            assert "--steps " + ("3" if name == first_name else "4") in task.get("CommandLine")


@pytest.mark.parametrize("spec_file", sorted(example_specs("hpcpack")))
def test_every_example_spec_submits(head, tmp_path, spec_file):
    """Issue 41: each spec of specs/ that names HPC Pack, as checked in, submitted from a copy of
    the repository's layout: its code staged on the shared folder, the job created from its XML and
    submitted; the head keeps it queued (it never runs here)."""
    copy_examples(tmp_path)
    head.plan = ["Queued"]
    proc = trainspec(tmp_path, environment(head, tmp_path), "submit", f"specs/{spec_file}", "-t", "hpcpack")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [name] = submitted_names(head)
    assert name.startswith(Path(spec_file).stem + "-") and ("POST", "Job/100/Submit") in head.calls
    assert list((tmp_path / "shared").glob("*/code/train.py")), proc.stdout  # the examples' code, staged
