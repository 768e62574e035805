"""Source files -> Documents: canonical text, sections and (for PDF) a page map.

``discover`` lists the files of folders; ``extract_all`` extracts them one by one in a child
worker process (a hung or crashing parser costs one document, recorded as failed);
``extract_file`` does one file in this process. Per format (see each module's docstring for
the rules, the title order included): ``markdown`` (md), ``plaintext`` (txt, rst), ``html``,
``pdf`` (pypdfium2), ``docx`` (python-docx). The canonical-text policy is in ``kbpack.text.canonical``.

Document title, by format: Markdown and HTML, the first level-1 heading (HTML then
``<title>``); plain text, the first top-level underlined title; PDF, the metadata title unless
blank or a placeholder; DOCX, the core ``title`` property, then the first ``Title``-styled
paragraph; in every case the file name stem when none of these exists.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# ``discover`` names both a submodule and its function. Imported lazily, the function lost to
# the module whenever the submodule was imported first (``kbpack.extract.worker`` imports it):
# the import system sets the package attribute to the submodule, so ``from kbpack.extract
# import discover`` returned a module. Imported here, the name is the function for good. It is
# cheap (os, fnmatch, kbpack.text.document).
from kbpack.extract.discover import Candidate, Discovery, discover

if TYPE_CHECKING:
    from kbpack.extract.common import EXTRACTOR_VERSIONS, KIND_BY_SUFFIX, MEDIA_TYPES
    from kbpack.extract.file import extract_file
    from kbpack.extract.limits import Limits
    from kbpack.extract.worker import extract_all

# Imported on first use: ``kbpack query`` needs the format table of ``common`` (its --kind
# choices), and importing the extractors and the worker with it cost a cold query ~35 ms.
_WHERE = {
    "EXTRACTOR_VERSIONS": "common",
    "KIND_BY_SUFFIX": "common",
    "MEDIA_TYPES": "common",
    "extract_file": "file",
    "Limits": "limits",
    "extract_all": "worker",
}

__all__ = [
    "EXTRACTOR_VERSIONS",
    "KIND_BY_SUFFIX",
    "MEDIA_TYPES",
    "Candidate",
    "Discovery",
    "Limits",
    "discover",
    "extract_all",
    "extract_file",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
