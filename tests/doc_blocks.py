"""The files a documentation page shows: fenced code blocks whose first line is `# file: <path>`.

Tests write them into a folder and run them as they are, so a page's example and the suite cannot drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```[a-z]*\n# file: (?P<path>\S+)\n(?P<body>.*?)^```$", re.S | re.M)


def doc_files(page: str) -> dict[str, str]:
    """`{relative path: text}` of every `# file:` block of `docs/<page>` (`README.md`: the project's README; the
    marker line kept: a comment)."""
    text = (ROOT / (page if page == "README.md" else f"docs/{page}")).read_text(encoding="utf-8")
    return {m["path"]: f"# file: {m['path']}\n{m['body']}" for m in _BLOCK.finditer(text)}


def write_doc_files(page: str, folder: Path) -> dict[str, Path]:
    """Write the `# file:` blocks of `docs/<page>` (or `README.md`) under `folder`; returns `{relative path: written path}`."""
    written = {}
    for rel, body in doc_files(page).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        written[rel] = path
    return written
