"""Random guard sources built from atoms with ``and``/``or``/``not`` and ``== true``: the
shape the absence analysis must see through, shared by its tests in expr and navigation."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def guard_sources(
    atoms: Sequence[str], keys: Sequence[str], depth: int = 3
) -> st.SearchStrategy[str]:
    """Guards nested up to ``depth``; each atom's ``{k}`` is one of ``keys``."""
    leaf = st.builds(lambda atom, key: atom.format(k=key), st.sampled_from(atoms),
                     st.sampled_from(keys))
    if depth == 0:
        return leaf
    inner = guard_sources(atoms, keys, depth - 1)
    return st.one_of(
        leaf,
        leaf,
        inner.map(lambda g: f"not ({g})"),
        inner.map(lambda g: f"({g}) == true"),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
    )
