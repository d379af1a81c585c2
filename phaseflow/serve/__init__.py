"""``phaseflow serve``: the agents of one or more workflows as an HTTP service (the
``phaseflow[serve]`` extra: Starlette, uvicorn, sse-starlette). See ``docs/serve.md``
and ``docs/http-api.md``.

Imported only by ``phaseflow serve`` and by hosts that mount :func:`create_app`: nothing
else in phaseflow imports it.
"""

from phaseflow.serve.app import create_app
from phaseflow.serve.config import ServeConfig
from phaseflow.serve.identity import Identity
from phaseflow.serve.served import serving

__all__ = ["Identity", "ServeConfig", "create_app", "serving"]
