"""Headless Debian Chromium for the browser tests, as a pytest plugin (tests/conftest.py loads it):
the ``chromium``, ``browser_context``, ``page`` and ``artifacts`` fixtures, for tests/browser and for
the tests of other directories that drive the side panel (tests/slurm)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM} (apt-get install -y chromium)")
    return CHROMIUM


@pytest.fixture
def browser_context(chromium: Path, tmp_path: Path) -> Iterator[object]:
    """A headless Chromium with a fresh profile (Playwright wants the profile as a parameter, not a flag).

    Per test, not per module: pytest-jupyter's autouse fixtures give every test an event loop and
    close it afterwards; started at module scope, Playwright's sync API would own the loop they pick.
    """
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "chromium-profile"
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(chromium), args=CHROMIUM_ARGS, viewport=VIEWPORT
        )
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """Where a test saves its screenshots (``test-artifacts/browser/<test>/``, git-ignored)."""
    folder = ARTIFACTS / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item, for fixtures that act on failure (screenshots)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def page(browser_context: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A new page; a test module's ``PAGE_VIEWPORT`` (``{"width": ..., "height": ...}``) sizes it."""
    page = browser_context.new_page()
    viewport = getattr(request.module, "PAGE_VIEWPORT", None)
    if viewport:
        page.set_viewport_size(viewport)
    try:
        yield page
    finally:
        page.close()


@pytest.fixture
def screenshot_on_failure(page: Any, artifacts: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """A full-page screenshot (``failure.png`` in the test's artifacts) when the test fails."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
