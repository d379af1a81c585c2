"""Keys a ',' cut from an unquoted value in a flow mapping, and the fix to say.

``{description: The department, and whether it is active}``: YAML ends the plain value
at the ',', so ``and whether it is active`` becomes a key with no value. Whatever
complains about that key (an unknown key, PF102; an unknown JSON Schema keyword, PF104)
gives the same fix, written here once: quote the value it was cut from.
"""

from __future__ import annotations

from phaseflow.expr.describe import clip
from phaseflow.spec import yamlnodes
from phaseflow.spec.scalar_positions import SourceText

__all__ = ["cut_keys", "quote_hint", "written_empty"]


def written_empty(node: yamlnodes.Node) -> bool:
    """A key written with nothing after it (``E.164`` in ``{a: b, E.164}``, or ``x:``)."""
    return isinstance(node, yamlnodes.Scalar) and node.value is None and node.text == ""


def cut_keys(source: SourceText, mapping: yamlnodes.Mapping) -> dict[int, tuple[str, str]]:
    """The keys of the flow mapping ``mapping`` that are the text after a ',' in an
    unquoted value (``{description: The phone, E.164}``: a plain key written without
    ':' and without a value), by ``id``: each with the key of the value it was cut from
    and that value as it was meant (the value and the cut keys joined by ', '). In one
    pass over the pairs as written (a merged key was written in another mapping)."""
    text = source.text
    start = source.index_of(mapping.line, mapping.column)
    if start >= len(text) or text[start] != "{":
        return {}  # a block mapping starts at its first key, a scalar
    found: dict[int, tuple[str, str]] = {}
    run: list[yamlnodes.Scalar] = []  # the cut keys after ``owner``
    owner: tuple[str, str] | None = None  # the key and value they were cut from

    def close() -> None:
        if owner is not None and run:
            meant = ", ".join([owner[1], *(str(k.value) for k in run)])
            for cut in run:
                found[id(cut)] = (owner[0], meant)
        run.clear()

    for key, value in mapping.pairs:
        if (owner is not None and written_empty(value) and key.style is None
                and "\n" not in key.text):
            end = source.index_of(key.line, key.column) + len(key.text)
            if not text[end:end + 200].lstrip(" \t\r\n").startswith(":"):
                run.append(key)
                continue
        close()
        owner = None
        if (isinstance(value, yamlnodes.Scalar) and value.style is None
                and isinstance(value.value, str)):
            owner = (str(key.value), value.value)
    close()
    return found


def quote_hint(name: str, meant: str) -> str:
    """The fix for a key cut from the unquoted value of ``name``, meant as ``meant``."""
    return (f"in a flow mapping ({{...}}) a ',' ends an unquoted value, so this is the "
            f"text after a ',' in '{clip(name)}'; quote that text: {clip(name)}: "
            f"{_double_quoted(clip(meant, 100))}")


def _double_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
