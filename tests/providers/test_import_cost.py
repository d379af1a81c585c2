"""Importing the providers package, or the scripted provider, never imports the SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    return set(proc.stdout.split())


def test_the_package_and_the_scripted_provider_do_not_import_openai() -> None:
    loaded = _modules_after(
        "import phaseflow.providers\n"
        "from phaseflow.providers import ScriptedProvider, WireNames\n"
        "ScriptedProvider(['hi'])"
    )
    assert "phaseflow.providers.scripted" in loaded
    assert not {m for m in loaded if m == "openai" or m.startswith(("openai.", "httpx"))}


def test_the_openai_provider_imports_the_sdk_only_when_used() -> None:
    loaded = _modules_after("from phaseflow.providers import OpenAIProvider")
    assert "phaseflow.providers.openai" in loaded and "openai" not in loaded
    used = _modules_after(
        "import asyncio\n"
        "from phaseflow.providers import OpenAIProvider\n"
        "from phaseflow.providers.protocol import ProviderRequest\n"
        "p = OpenAIProvider('m', base_url='http://127.0.0.1:9/v1')\n"
        "async def go():\n"
        "    return [e async for e in p.stream(ProviderRequest('', '', (), (), 'r'))]\n"
        "asyncio.run(go())"
    )
    assert "openai" in used
