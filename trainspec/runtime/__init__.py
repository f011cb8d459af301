"""Runtime side of trainspec: the shim that runs inside every training process.

The shim itself is one stdlib-only file (``shim.py``) that the compiler copies,
byte for byte, next to every compiled job; ``SHIM_PATH`` points at it.
"""

from pathlib import Path

from .shim import DETECTORS, Expectation, ShimError, World, check, detect, normalize

SHIM_PATH = Path(__file__).resolve().with_name("shim.py")

__all__ = ["DETECTORS", "SHIM_PATH", "Expectation", "ShimError", "World", "check", "detect", "normalize"]
