"""sha256 of small data without ``import hashlib``, which loads OpenSSL and makes a constructor
for each of its algorithms (~4 ms CPU of a start) for one hash that CPython also builds in (as
the standard library's own ``random`` avoids hashlib).

    from trainspec.core.digests import sha256
    sha256(data).hexdigest()

The same digests, the same methods (``update``, ``digest``, ``hexdigest``, ``copy``), but ~5x
slower per byte than OpenSSL's (~4 ms a megabyte here): for a spec, a runtime file, a header.
What hashes megabytes (check's cache: trainspec's own source, every output) imports hashlib.
"""

from __future__ import annotations

try:
    from _sha2 import sha256  # Python 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # Python 3.9 - 3.11
    except ImportError:  # an interpreter built without them
        from hashlib import sha256

__all__ = ["sha256"]
