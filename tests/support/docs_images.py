"""The README's screenshots, taken by the browser tests that check what they show.

Each such test calls :func:`keep_for_docs` with its screenshot and the README image it stands for;
with ``GPUGEEK_UPDATE_DOCS_SCREENSHOT=1`` (what ``make screenshots`` sets, running those tests only)
the image in ``docs/images/`` is replaced, otherwise nothing is written there.
``tests/core/test_docs_images.py`` holds the README, the images and these calls to each other.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
UPDATE_ENV = "GPUGEEK_UPDATE_DOCS_SCREENSHOT"


def keep_for_docs(screenshot: Path, image: str) -> None:
    """Replace ``docs/images/<image>`` with ``screenshot`` when the screenshots are being regenerated."""
    if os.environ.get(UPDATE_ENV) == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screenshot, DOCS_IMAGES / image)
