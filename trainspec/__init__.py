"""trainspec: one training spec, compiled to every platform's job file."""

__version__ = "0.1.0"
