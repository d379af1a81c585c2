"""Fixtures of the web view's tests (defined in :mod:`tests.support.serve_fixtures`,
shared with the serve tests): one refund desk server (a real ``phaseflow serve`` process on
loopback, SQLite store), an HTTP client of it, and one headless Chromium shared by a
module."""

from tests.support.serve_fixtures import browser, client, desk

__all__ = ["browser", "client", "desk"]
