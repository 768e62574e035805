"""``python -m kbpack`` is the ``kbpack`` command."""

from kbpack.entry import main

main()
