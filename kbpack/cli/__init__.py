"""The ``kbpack`` command: the start-up path (``entry``), the click group and the one mapping of
errors to exit codes (``main``), one module per command in ``commands``, the options several
commands share (``options``), and the terminal rendering of results and reports. No library
module imports this package.
"""

__all__ = [
    "batch_queries",
    "build_report",
    "commands",
    "entry",
    "fast_exit",
    "main",
    "options",
    "plain_text",
    "render",
]
