"""Fixtures of the serve tests (defined in :mod:`tests.support.serve_fixtures`, shared
with the web view's tests): a refund desk server shared by a module's tests, an HTTP
client of it, and a headless Chromium."""

from tests.support.serve_fixtures import browser, client, desk

__all__ = ["browser", "client", "desk"]
