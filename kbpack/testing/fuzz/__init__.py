"""Structure-aware fuzzing of what reads untrusted input: the pack reader and ``verify``
(``pack_mutations`` + ``pack_target``) and the extractors through the build's worker process
(``doc_mutations`` + ``doc_target``). ``runner`` drives either with a seeded ``random.Random``
and turns a crash, a hang, an internal error or a silent wrong read into a ``Finding``.

``tests/hostile/test_fuzz.py`` runs it briefly on every test run; ``bench/fuzz.py`` runs it long.
"""
