"""The README's screenshots stay regenerable: every image it shows is in ``docs/images/`` and taken
by a browser test (``keep_for_docs``, which ``make screenshots`` runs), and no image is orphaned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support import docs_images

ROOT = Path(__file__).resolve().parents[2]


def _taken_by_tests() -> set[str]:
    calls = (
        re.findall(r'keep_for_docs\([^)]*?"([\w.-]+\.png)"\)', p.read_text())
        for p in ROOT.glob("tests/browser/test_*.py")
    )
    return {name for found in calls for name in found}


def test_every_readme_image_is_in_docs_and_taken_by_a_browser_test() -> None:
    shown = set(re.findall(r"\(docs/images/([\w.-]+\.png)\)", (ROOT / "README.md").read_text()))
    kept = {p.name for p in (ROOT / "docs" / "images").glob("*.png")}
    taken = _taken_by_tests()
    assert shown == kept, f"shown but missing: {shown - kept}; in docs/images but not shown: {kept - shown}"
    assert taken == shown, f"shown but no test takes it: {shown - taken}; taken but not shown: {taken - shown}"


def test_images_are_replaced_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(b"\x89PNG fake screenshot")
    monkeypatch.setattr(docs_images, "DOCS_IMAGES", tmp_path / "images")
    monkeypatch.delenv(docs_images.UPDATE_ENV, raising=False)
    docs_images.keep_for_docs(shot, "panel.png")
    assert not (tmp_path / "images").exists()
    monkeypatch.setenv(docs_images.UPDATE_ENV, "1")
    docs_images.keep_for_docs(shot, "panel.png")
    assert (tmp_path / "images" / "panel.png").read_bytes() == shot.read_bytes()
