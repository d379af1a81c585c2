"""The shared helpers of the test suite: workflows, fakes, builders, processes and
servers that several test modules use, imported by them from here.

A test module never imports another test module (``tests/test_*.py``,
``tests/**/test_*.py``): what two of them share lives in a module of this package
(``tests/test_layers.py`` fails otherwise). Fixtures stay in ``conftest.py`` files, pytest's
mechanism; a type or helper a test imports lives here.
Nothing here is collected as a test (no ``test_*`` module, no ``test_*`` function)."""
