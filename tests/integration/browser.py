"""A real headless browser for the web UI tests: Debian's chromium driven by Playwright (no browser download).

`make test` installs chromium when `/usr/bin/chromium` is missing; these tests fail (never skip) without it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Playwright page in a fresh headless chromium (its own user-data dir); closed on exit.

    Raises:
        AssertionError: chromium is not installed (run `make test`, which installs it).
    """
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get)"
    with tempfile.TemporaryDirectory(prefix="ek-chromium-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": width, "height": height},
        )
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("requestfailed", lambda request: errors.append(f"request failed: {request.url}"))
            page.errors = errors  # the test asserts none happened
            yield page
        finally:
            context.close()


def open_page(page: Any, url: str, name: str, min_polls: int = 1) -> None:
    """Show page `name` (`graph`, `checkpoints`, `latency`, `job`) of the UI at `url`, after `min_polls` updates."""
    page.goto(f"{url}#{name}")
    page.wait_for_function(f"Number(document.body.dataset.polls || 0) >= {min_polls}", timeout=30_000)
