"""The contract between compiled jobs and the shim is written once, in the shim (issue 12): the
TRAINSPEC_* names and the default ports. Other modules import them; none spells them again."""

import re

from conftest import REPO

# the shim defines them; the Ray driver and the secrets helper ship beside it as files of their own
# (each stands alone); TRAINSPEC_DEBUG and TRAINSPEC_CACHE_DIR are the CLI's own settings, never
# seen by a job
ALLOWED = {"trainspec/runtime/shim.py", "trainspec/runtime/ray_driver.py", "trainspec/runtime/secret_refs.py"}


def test_the_trainspec_variables_and_ports_are_spelled_only_in_the_shim():
    spelled = []
    for path in sorted((REPO / "trainspec").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            # the job's variables; not the settings of trainspec's own process (a traceback, check's
            # cache, submit's polling, where HPC Pack's shared folder is mounted for stage.sh)
            literal = re.search(r"""["']TRAINSPEC_(?!DEBUG|CACHE_DIR|POLL_SECONDS|SHARED_DIR)[A-Z_]*["']""", code)
            port = re.search(r"(?<![\w.])(6105|29400)(?![\w.])", code)
            if (literal or port) and "description=" not in code:
                spelled.append(f"{name}:{number}: {line.strip()}")
    assert spelled == []
