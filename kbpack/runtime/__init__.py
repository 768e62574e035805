"""Process plumbing every layer may use: interrupts that are never lost, progress on a
terminal, and the per-machine cache folder. Imports nothing of kbpack but ``errors``.
"""

__all__ = ["cache", "interrupt", "progress"]
