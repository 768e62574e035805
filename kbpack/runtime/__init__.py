"""Process plumbing every layer may use: interrupts that are never lost, progress on a
terminal, the per-machine cache folder, and untrusted text made safe to print on a terminal
(``terminal.printable``). Imports nothing of kbpack but ``errors``.
"""

__all__ = ["cache", "interrupt", "progress", "terminal"]
