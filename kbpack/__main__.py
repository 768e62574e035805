"""``python -m kbpack`` is the ``kbpack`` command."""

from kbpack.cli import main

main()
