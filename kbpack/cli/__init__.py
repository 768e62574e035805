"""The ``kbpack`` command: the start-up path (``entry``), the click group (``main``), one
module per command family in ``commands``, and the terminal rendering of results and reports.
No library module imports this package.
"""

__all__ = [
    "batch_queries",
    "build_report",
    "commands",
    "entry",
    "fast_exit",
    "main",
    "plain_text",
    "render",
]
