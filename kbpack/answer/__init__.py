"""``kbpack ask``: an answer from a local LLM whose every sentence is checked against the
passage it cites, or an extractive answer quoted from the pack, or "not in this pack".

- ``grounding``: sentences, citations, and the support check (pure functions).
- ``extractive``: the best-matching sentences of the top passages (no model).
- ``generate``: a llama.cpp chat model, its own chat template, streamed tokens.
- ``answer``: retrieve -> sources under the model's context -> generate -> check -> fallback.

Generation never writes into a pack.
"""
