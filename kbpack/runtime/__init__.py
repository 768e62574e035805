"""Process plumbing every layer may use: interrupts that are never lost, progress on a
terminal, the per-machine cache folder and the memos kept in it (``memo``), child processes
(``child``: forked or fresh; ``sandbox``: a confined one for untrusted bytes), and untrusted
text made safe to print on a terminal (``terminal.printable``). Imports nothing of kbpack but
``errors``.
"""

__all__ = ["cache", "child", "interrupt", "memo", "progress", "sandbox", "terminal"]
