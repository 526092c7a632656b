"""Headless Chromium for the web tests: Debian's build (``/usr/bin/chromium``) driven by Playwright, which
the dev extra installs with its own driver (never ``playwright install``: it downloads another browser)."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


def missing() -> str | None:
    """Why the browser tests cannot run here (with the fix), or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is absent: apt-get install -y --no-install-recommends chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is absent: pip install playwright (never `playwright install`)"
    return None
