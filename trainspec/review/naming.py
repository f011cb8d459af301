"""The name and digest a compiled job is submitted and followed with (``submit`` gives it, ``plan``
shows it): the spec's name and the digest of what was compiled, whatever folder it is written to,
and of the code folder it ships (a changed train.py is a new job)."""

from __future__ import annotations

from typing import List, Tuple

from trainspec.compiler.base import Artifact
from trainspec.jobs import api
from trainspec.registry.build import Outcome, target as target_of


def digest_of(outcome: Outcome, artifact: Artifact) -> str:
    """The digest of what was compiled for ``artifact``'s target, whatever folder it is written to
    and whatever the spec file is called: the job compiled again for one canonical folder beside
    the spec (a compiled job names its code relative to where it is written), its files without
    provenance, and the code folder's digest (what the job runs: a changed train.py is a new job)."""
    from trainspec.compiler.write import landing
    from trainspec.review.outputs import without_provenance

    valid = outcome.valid
    canonical = valid.source.dir.resolve() / "build" / valid.name / artifact.target
    compiled = target_of(artifact.target).lower(valid, landing(canonical))
    files = [(f.path, without_provenance(f.data, outcome)) for f in compiled.files]
    return api.compiled_digest(files + _code_files(valid))


def _code_files(valid) -> List[Tuple[str, bytes]]:
    """("code", the code folder's digest) (review/cache.py code_digest: its files' names and bytes,
    none followed), or nothing when the code is not a local folder. Worked out once per folder in
    a command, however many specs and targets share it (core/memo.py), and from its files' stats
    where check's cache folder remembers them unchanged: plan and review of a hundred specs over
    a 50,000-file folder read it once, and a second run reads only the files that changed."""
    from trainspec.core.memo import answer
    from trainspec.review.cache import code_digest

    code = valid.spec.code
    if not code:
        return []
    folder = valid.resolve(code)
    if not folder.is_dir():
        return []
    return [("code", answer(code_digest, str(folder)).encode())]


def platform_name(outcome: Outcome, artifact: Artifact) -> str:
    """The name ``submit`` gives this compiled job on its platform (and ``plan`` shows)."""
    return platform_job(outcome, artifact)[0]


def platform_job(outcome: Outcome, artifact: Artifact) -> Tuple[str, str]:
    """This compiled job's name on its platform, and the full digest submit records with it."""
    digest = digest_of(outcome, artifact)
    limit = target_of(artifact.target).job_name_limit(outcome.valid)
    return api.job_name(outcome.valid.name, digest, limit), digest
