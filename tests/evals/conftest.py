"""The eval tests' fixtures: the headless Chromium the HTML report is opened in."""

from tests.support.serve_fixtures import browser

__all__ = ["browser"]
