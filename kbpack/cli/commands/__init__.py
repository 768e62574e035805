"""One module per command, named as the command (``eval``: ``evaluate``); ``kbpack.cli.main``
imports each only when its command runs. Output helpers they share: ``common``; options they
share: ``kbpack.cli.options``."""
