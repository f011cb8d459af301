"""The shim's per-node install of ``environment.pip`` (TRAINSPEC_PIP): once per node, into the
node's temporary folder, before the command. Platform-independent: joined into every job's shim
(``shim_source`` in runtime/__init__.py); standard library only."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

from trainspec.runtime.shim import ENV_PIP, ShimError  # package only

PIP_DIR_PREFIX = "trainspec-pip-"


def pip_requirements(env: Mapping[str, str]) -> list[str]:
    """The spec's environment.pip, as the compiler wrote it into TRAINSPEC_PIP (a JSON list)."""
    text = env.get(ENV_PIP)
    if not text:
        return []
    import json

    try:
        requirements = json.loads(text)
    except ValueError:
        requirements = None
    if not isinstance(requirements, list) or not all(isinstance(r, str) and r and not r.startswith("-")
                                                     for r in requirements):
        raise ShimError("%s=%r is not a JSON list of pip requirements" % (ENV_PIP, text))
    return requirements


def pip_folder(job: str, requirements: list[str], tmpdir: str) -> str:
    """This node's folder of the job's packages: in the node's own temporary folder, named by
    the user, the job (its platform's id, ``Detector.job_variable``: "" where the platform runs
    one job per machine) and what is installed, so every process of a job on a node finds the
    same one and no other job's."""
    import hashlib

    key = "\0".join([sys.executable, job, *requirements])
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(tmpdir, "%s%d-%s" % (PIP_DIR_PREFIX, os.getuid(), digest))


def _own_folder(folder: str) -> None:
    """Create ``folder`` (0700) or accept it only if it is this user's own real folder that no one
    else may write: a shared /tmp must not let another user plant the packages the job imports."""
    import stat

    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ShimError("%s is not a folder of this user's that only it can write: it would hold the "
                        "packages of environment.pip (remove it, or set TMPDIR)" % folder)


def install_pip(env: MutableMapping[str, str], run=None, tmpdir: str | None = None, job: str = "") -> str | None:
    """Install TRAINSPEC_PIP into this node's folder (``pip install --target``) unless another
    process of the job on this node did, then put the folder first on PYTHONPATH, so the command
    (and every process it starts) imports them. The first process to take the folder's lock
    installs; the others wait for it and find it done. ``run`` runs pip (tests: a stand-in),
    ``tmpdir`` is the node's temporary folder (TMPDIR, else /tmp), ``job`` the platform's id of the
    job (pip_folder). Returns the folder (None: nothing to do)."""
    requirements = pip_requirements(env)
    if not requirements:
        return None
    import fcntl
    import subprocess
    import tempfile

    folder = pip_folder(job, requirements, tmpdir or tempfile.gettempdir())
    _own_folder(folder)
    site = os.path.join(folder, "site-packages")
    with open(os.path.join(folder, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        if not os.path.exists(os.path.join(folder, "installed")):
            print("trainspec: installing environment.pip on this node into %s: %s"
                  % (site, " ".join(requirements)), file=sys.stderr)
            sys.stderr.flush()
            argv = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                    "--target", site, "--", *requirements]
            code = (run or subprocess.call)(argv)
            if code != 0:
                raise ShimError("pip could not install environment.pip (exit %d): its messages are above"
                                % code)
            with open(os.path.join(folder, "installed"), "w") as done:
                done.write("\n".join(requirements) + "\n")
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = site + (os.pathsep + path if path else "")
    return site
