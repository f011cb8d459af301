"""The `trainspec` command line. Thin: parses flags (parser.py), runs the command, prints
diagnostics (output.py).

argparse (the standard library's) rather than click: click's import alone was 12-15 ms of a
~110 ms `trainspec compile` (README, "Speed"). Imports stay lazy so `compile` starts fast
and never loads torch, ray, azure-ai-ml or pydantic: each command is a module of its own,
``trainspec/cli/<module>.py``, imported only when it runs; its ``command(args)`` takes the
parsed arguments and returns the exit code.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Optional, Sequence

# trainspec's models use no pydantic plugin; scanning every installed package's entry points
# for them costs more than compiling a spec (pydantic is imported only to explain bad specs).
if "PYDANTIC_DISABLE_PLUGINS" not in os.environ:
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    CLI_STARTUP_ENV = ("PYDANTIC_DISABLE_PLUGINS",)  # ours, not the user's: never passed to a training process
else:
    CLI_STARTUP_ENV = ()




def main(argv: Optional[Sequence[str]] = None) -> None:
    from trainspec.cli.output import UsageError, _err
    from trainspec.cli.parser import parser
    from trainspec.core.memo import one_command
    from trainspec.schema.templating import outdated_jinja

    argv = list(argv) if argv is not None else sys.argv[1:]
    top = parser(argv)
    if not argv:
        top.print_help()  # bare `trainspec`: what it does and how to start
        sys.exit(0)
    args = top.parse_args(argv)  # exits 2 on a bad command line
    refused = outdated_jinja()  # before anything is read: its sandbox is what a pull request meets
    if refused:
        _err(f"trainspec: error: {refused}")
        sys.exit(3)
    try:
        with one_command():  # file-system answers are remembered for this command only
            code = importlib.import_module(f"trainspec.cli.{args.module}").command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _closed_pipe()
        code = 0
    except UsageError as exc:
        args.parser.error(str(exc))  # usage and message on stderr, exit 2
    except KeyboardInterrupt:
        _err("trainspec: interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug of ours: say so in one line, no traceback unless asked
        if os.environ.get("TRAINSPEC_DEBUG"):
            raise
        _err(f"trainspec: internal error: {type(exc).__name__}: {exc} "
             "(set TRAINSPEC_DEBUG=1 for a traceback, and please report it)")
        sys.exit(70)
    sys.exit(code)


def _closed_pipe() -> None:
    """The reader went away (`trainspec plan x.yaml | head -1`): stop quietly with status 0, as
    `git log | head` does. Python would report the failed flush at exit: point stdout at
    /dev/null first (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    main()
