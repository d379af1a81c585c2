"""What a captured content never shows: the values of keys that name a secret.

Message contents are recorded only when asked for (see ``docs/observability.md``), and
free text is recorded as it is: nothing can tell a secret in a sentence. But a JSON
object - a tool's arguments, a tool's result, a call in the history - says what its
values are: the value of a key such as ``password``, ``api_key``, ``access_token``,
``client_secret`` or ``authorization`` is replaced by ``***`` wherever it is nested.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: a key whose value is a secret: the whole key, or its last ``_``/``-`` part(s)
SECRET_KEY = re.compile(
    r"(?:^|[_-])(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|auth|"
    r"authorization|cookie|credentials?|private[_-]?key|access[_-]?key)$", re.I)
HIDDEN = "***"


def redacted(value: Any) -> Any:
    """``value`` with the value of every secret-naming key replaced (a copy)."""
    if isinstance(value, dict):
        return {k: HIDDEN if isinstance(k, str) and SECRET_KEY.search(k) else redacted(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    return value


def redacted_text(value: Any) -> str:
    """``value`` as text for a span: a string as it is, unless it is a JSON object or
    array (a tool's result), which is redacted; anything else as redacted JSON."""
    if isinstance(value, str):
        if not value.lstrip().startswith(("{", "[")):
            return value
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return json.dumps(redacted(parsed), ensure_ascii=False)
    return json.dumps(redacted(value), ensure_ascii=False, default=str)
