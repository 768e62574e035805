"""A llama.cpp chat model: checked, loaded, and asked with the chat template its GGUF carries.

The model is identified by the SHA-256 of its file, never by its name. Generation is greedy at
temperature 0 and seeded otherwise, so the same question on the same pack and model gives the
same answer. Tokens are handed to a callback as they come; Ctrl-C raises KeyboardInterrupt
between two tokens (a token's llama.cpp call is milliseconds), which ends the stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbpack.errors import ModelError, UsageError
from kbpack.runtime import interrupt

SEED = 1234  # fixed: a reproducible answer at any temperature
# tokens for the instructions, the sources and the question (--max-tokens come on top):
# prompt processing is what the user waits for, and 1024 keeps Gemma 3 270M's first token
# near 2 s on 2 cores (bench/RESULTS.md, "Ask")
DEFAULT_CONTEXT = 1024
REPEAT_PENALTY = 1.1  # a small model otherwise loops on one line until --max-tokens
TEMPLATE_KEY = "tokenizer.chat_template"
# A GGUF without a chat template gets a plain completion prompt ending in "Answer:" (Gemma 3
# 270M's GGUF, the README's example, is such a pretrained model: given Gemma's turn markers it
# repeats the question). Its answer ends where it starts another question.
COMPLETION_SUFFIX = "\nAnswer:"
COMPLETION_STOP = ["\nQuestion:", "\nSources:", "\n\n["]  # "\n\n[": a made-up source
FIX = "give a llama.cpp chat model GGUF with --llm (README, Ask)"


@dataclass
class Generation:
    text: str = ""
    tokens: int = 0
    first_token_s: float | None = None  # from the call to the first token (prompt processing)
    generation_s: float = 0.0
    finish: str | None = None  # "stop", "length"; None when interrupted

    @property
    def tokens_per_s(self) -> float | None:
        if self.first_token_s is None or self.tokens < 2:
            return None
        after_first = self.generation_s - self.first_token_s
        return (self.tokens - 1) / after_first if after_first > 0 else None


@dataclass
class ChatModel:
    path: Path
    sha256: str
    name: str
    n_ctx: int
    template: str  # "gguf": the file's own chat template; "none": plain completion
    llm: Any = field(repr=False)

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "template": self.template}

    def stream(
        self, prompt: str, max_tokens: int, temperature: float = 0.0
    ) -> Iterator[tuple[str, str | None]]:
        """The answer's pieces of text as the model writes them, each with the finish reason
        (``stop``, ``length``) of the last one, None before it."""
        how = {
            "stream": True,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": SEED,
            "repeat_penalty": REPEAT_PENALTY,
        }
        if self.template == "gguf":
            # one user turn: some templates (Gemma's) have no system turn
            chunks = self.llm.create_chat_completion(
                messages=[{"role": "user", "content": prompt}], **how
            )
        else:
            chunks = self.llm.create_completion(
                prompt + COMPLETION_SUFFIX, stop=COMPLETION_STOP, **how
            )
        for chunk in chunks:
            interrupt.check()  # a Ctrl-C swallowed inside llama.cpp's log callback
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
            finish = choice.get("finish_reason")
            if piece or finish:
                yield piece or "", finish

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        temperature: float = 0.0,
        on_token: Callable[[str], None] | None = None,
    ) -> Generation:
        out = Generation()
        start = time.perf_counter()
        pieces: list[str] = []
        for piece, finish in self.stream(prompt, max_tokens, temperature):
            out.finish = finish or out.finish
            if not piece:
                continue
            if out.first_token_s is None:
                out.first_token_s = time.perf_counter() - start
            pieces.append(piece)
            out.tokens += 1
            if on_token is not None:
                on_token(piece)
        out.generation_s = time.perf_counter() - start
        out.text = "".join(pieces).strip()
        return out


def check_chat_gguf(path: Path) -> dict[str, Any]:
    """The GGUF's metadata, or a UsageError naming the file and the fix: missing, not a GGUF,
    or an embedding model (it has a pooling type, or it is a BERT)."""
    from kbpack.model.gguf_header import read_gguf_metadata

    if not path.exists():
        raise UsageError(f"{path}: no such file; {FIX}")
    if not path.is_file():
        raise UsageError(f"{path}: not a regular file; {FIX}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror or e}); {FIX}") from e
    if magic != b"GGUF":
        raise UsageError(f"{path}: not a GGUF file (no GGUF magic at byte 0); {FIX}")
    try:
        meta = read_gguf_metadata(path)
    except ModelError as e:
        raise UsageError(f"{e}; {FIX}") from e
    arch = str(meta.get("general.architecture", "unknown"))
    if f"{arch}.pooling_type" in meta or "bert" in arch:
        raise UsageError(f"{path}: an embedding model ({arch}), not a chat model; {FIX}")
    return meta


def load_chat_model(
    path: Path, threads: int | None = None, n_ctx: int = DEFAULT_CONTEXT
) -> ChatModel:
    """Check, identify (SHA-256) and load a chat GGUF. ModelError if llama.cpp cannot load it."""
    import os

    from kbpack.model.embedder import _last_error, _llama_errors, _silence
    from kbpack.model.identity import sha256_file
    from kbpack.model.llama_backend import load_cpu_backend

    meta = check_chat_gguf(path)
    sha = sha256_file(path)
    arch = str(meta.get("general.architecture", ""))
    trained = meta.get(f"{arch}.context_length")
    if isinstance(trained, int) and trained > 0:
        n_ctx = min(n_ctx, trained)
    try:
        import llama_cpp
    except ImportError as e:
        raise ModelError(f"llama-cpp-python is not importable ({e}); reinstall kbpack") from e
    _silence(llama_cpp)  # llama.cpp's log to a buffer, stdout and stderr left alone
    load_cpu_backend(llama_cpp)
    n = threads or max(1, min(os.cpu_count() or 1, 8))
    template = "gguf" if isinstance(meta.get(TEMPLATE_KEY), str) else "none"
    _llama_errors.clear()
    try:
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n,
            n_threads_batch=n,
            seed=SEED,
            verbose=False,
        )
    except (ValueError, RuntimeError, OSError) as e:
        raise ModelError(f"{path}: llama.cpp cannot load the model ({_last_error() or e})") from e
    name = str(meta.get("general.name") or path.stem)
    return ChatModel(path=path, sha256=sha, name=name, n_ctx=n_ctx, template=template, llm=llm)
