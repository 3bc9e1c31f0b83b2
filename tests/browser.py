"""Headless Chromium for the tests that open a page: required, never silently skipped.

CI (``.ci/run``) installs Debian's ``chromium``; a test that needs it fails where it is missing,
saying how to install it, unless ``SUMMEVAL_SKIP_BROWSER_TESTS=1`` says to skip such tests on
purpose (a machine that cannot have a browser).
"""

from __future__ import annotations

import os
import shutil

import pytest

SKIP_BROWSER_TESTS = "SUMMEVAL_SKIP_BROWSER_TESTS"


def chromium() -> str:
    """The Chromium executable; the calling test fails (or, when told to, skips) without one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is not None:
        return found
    if os.environ.get(SKIP_BROWSER_TESTS) == "1":
        pytest.skip(f"no Chromium, and {SKIP_BROWSER_TESTS}=1 skips the browser tests")
    pytest.fail(
        "this test opens the HTML report in headless Chromium, and no chromium (or "
        "chromium-browser) is on PATH: install it (Debian, Ubuntu: apt-get install chromium), "
        f"or set {SKIP_BROWSER_TESTS}=1 to skip the browser tests on purpose",
        pytrace=False,
    )
