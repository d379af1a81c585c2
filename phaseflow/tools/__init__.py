"""Tools: the host's Python callables, as a session offers, checks and calls them.

``@tool`` makes a :class:`FunctionTool` of a function (:mod:`phaseflow.tools.function`),
with the JSON Schema of its arguments read from its signature and docstring
(:mod:`phaseflow.tools.schema`); the model's arguments are checked against that schema
(:mod:`phaseflow.tools.arguments`) and converted to what the function declares; what a
tool writes to the state is checked against the key's declared type
(:mod:`phaseflow.tools.state_types`). A tool that asks for it gets a
:class:`ToolContext`; it may return a :class:`ToolResult` to keep apart what the model
sees and what is written. See ``docs/sessions.md``.
"""

from phaseflow.tools.function import Attachment, FunctionTool, ToolContext, ToolResult, tool

__all__ = ["Attachment", "FunctionTool", "ToolContext", "ToolResult", "tool"]
