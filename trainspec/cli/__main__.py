"""python -m trainspec.cli: the same as the trainspec command."""

from trainspec.cli import main

main()
