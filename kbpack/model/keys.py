"""Every GGUF metadata key and tensor name kbpack reads or writes, in one place.

The ``general.*``, ``bert.*`` and ``tokenizer.ggml.*`` names are llama.cpp's (gguf-py
``constants.py``); the ``kbpack.*`` keys are ours and llama.cpp ignores them.
"""

from __future__ import annotations

ARCHITECTURE = "general.architecture"
NAME = "general.name"
FILE_TYPE = "general.file_type"

# Formatted with the architecture, e.g. CONTEXT_LENGTH.format(arch="bert").
CONTEXT_LENGTH = "{arch}.context_length"
EMBEDDING_LENGTH = "{arch}.embedding_length"
FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
BLOCK_COUNT = "{arch}.block_count"
HEAD_COUNT = "{arch}.attention.head_count"
LAYER_NORM_EPS = "{arch}.attention.layer_norm_epsilon"
CAUSAL = "{arch}.attention.causal"
POOLING_TYPE = "{arch}.pooling_type"
CLASSIFIER_LABELS = "{arch}.classifier.output_labels"  # a reranker's outputs (one: relevance)

TOKENIZER_MODEL = "tokenizer.ggml.model"
TOKENS = "tokenizer.ggml.tokens"
TOKEN_TYPES = "tokenizer.ggml.token_type"
TOKEN_TYPE_COUNT = "tokenizer.ggml.token_type_count"
BOS_ID = "tokenizer.ggml.bos_token_id"  # llama.cpp's WordPiece tokenizer adds it as [CLS]
UNK_ID = "tokenizer.ggml.unknown_token_id"
PAD_ID = "tokenizer.ggml.padding_token_id"
CLS_ID = "tokenizer.ggml.cls_token_id"
SEP_ID = "tokenizer.ggml.seperator_token_id"  # sic: llama.cpp's spelling
MASK_ID = "tokenizer.ggml.mask_token_id"

# Tokens per input that the model was trained and evaluated with, special tokens included
# (sentence-transformers' max_seq_length). llama.cpp itself would accept context_length.
KBPACK_WINDOW = "kbpack.token_window"
# SHA-256 of the safetensors weights the GGUF was converted from (provenance, cache key).
KBPACK_SOURCE_SHA256 = "kbpack.source_sha256"
KBPACK_CONVERTER = "kbpack.converter"

# llama.cpp's enum llama_pooling_type, as stored in ``{arch}.pooling_type``.
POOLING_NAMES: dict[int, str] = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}
