"""What docs/security.md promises a reviewer of untrusted pull requests, held as a whole: the
review commands run nothing a spec says and fetch nothing a spec names, and every test the page
cites exists. The other promises have their own files (test_untrusted_paths.py,
test_hostile_names.py, test_secrets.py, test_review_untrusted.py, test_import_hostile.py)."""

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO, git, ts

SPEC = """\
version: 1
name: {name}
description: "`{touch} description` $({touch} description) see http://127.0.0.1:{port}/description"
code: ../code
command: python -c "open('{marker}', 'w')" --data {{{{ inputs.data }}}}
resources: {{nodes: {nodes}, gpus_per_node: 0}}
environment:
  image: 127.0.0.1:{port}/trainspec/image:1
env:
  FROM_SHELL: "$({touch} env)"
  BACKTICKS: "`{touch} backticks`"
inputs:
  data: {{path: "http://127.0.0.1:{port}/data.csv"}}
targets:
  azureml: {{compute: gpu-cluster}}
"""


class Recorder(BaseHTTPRequestHandler):
    """Answers anything with 404 and remembers that it was asked."""

    asked: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        Recorder.asked.append(self.path)
        self.send_error(404)

    do_HEAD = do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def listener():
    """A server on loopback that records every request (stopped by the test)."""
    Recorder.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_reviewing_runs_nothing_a_spec_says_and_fetches_nothing_it_names(tmp_path, listener):
    """A pull request's spec whose command, env and description would leave a file behind if
    anything ran them, and whose data, image, description and `extends` name a server: every
    review command (validate, compile, plan, diff, check, with --git too) leaves no file and
    sends that server nothing."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print('train')\n")
    marker = tmp_path / "RAN"
    touch = f"touch {tmp_path / 'RAN-'}"
    spec = root / "specs" / "job.yaml"
    values = dict(name="job", touch=touch, port=listener, marker=marker)
    spec.write_text(SPEC.format(nodes=2, **values))
    (root / "specs" / "remote.yaml").write_text(
        f"extends: http://127.0.0.1:{listener}/base.yaml\nversion: 1\nname: remote\n")
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "base", cwd=root)
    spec.write_text(SPEC.format(nodes=4, **values))  # the pull request's change

    runs = [ts("validate", "specs/", cwd=root),
            ts("compile", "specs/job.yaml", "-o", "build/", cwd=root),
            ts("plan", "specs/job.yaml", cwd=root),
            ts("plan", "--git", "HEAD", "specs/job.yaml", "--format", "markdown", cwd=root),
            ts("diff", "--git", "HEAD", "specs/job.yaml", "--format", "markdown", cwd=root),
            ts("check", "specs/job.yaml", "--out", "build/", cwd=root)]
    for proc in runs:
        assert proc.returncode in (0, 1), proc.args
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert runs[0].returncode == 1 and "extends" in runs[0].stdout + runs[0].stderr  # a URL is no base
    assert [p.returncode for p in runs[1:]] == [0, 0, 0, 0, 0]
    assert "4 node(s)" in runs[3].stdout  # the review did happen
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("RAN")) == []
    assert Recorder.asked == []
    # and the server was there to be asked: a fetch would have been recorded
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError):
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        direct.open(f"http://127.0.0.1:{listener}/probe", timeout=10)
    assert Recorder.asked == ["/probe"]


CITED = re.compile(r"`?(tests/[\w/]+\.py)(?:::(\w+))?`?")


def test_every_test_the_security_page_cites_exists():
    """docs/security.md says which tests hold each guarantee: a renamed or deleted test makes
    the page wrong, so it fails here."""
    page = (REPO / "docs" / "security.md").read_text()
    cited = CITED.findall(page)
    assert len(cited) >= 20
    for file, name in cited:
        source = REPO / file
        assert source.is_file(), file
        if name:
            assert re.search(rf"^def {name}\(", source.read_text(), re.M), f"{file}::{name}"
