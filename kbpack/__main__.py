"""``python -m kbpack`` is the ``kbpack`` command."""

from kbpack.cli.entry import main

main()
