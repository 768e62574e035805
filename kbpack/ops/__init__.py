"""Operations on packs, each one library call the CLI, serve and tests use alike: build,
update, merge, split, migrate (with the registered format steps), diff, restore, evaluate,
calibrate, cluster builds, output-path checks.
"""

__all__ = [
    "build",
    "calibrate",
    "cluster",
    "diff",
    "evaluate",
    "evaluate_pack",
    "format_1_to_2",
    "merge",
    "migrate",
    "outpath",
    "restore",
    "shards",
    "split",
    "update",
]
