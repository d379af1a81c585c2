"""The names phaseflow's spans, attributes and metrics use, in one place.

The ``gen_ai.*``, ``server.*`` and ``error.type`` names are those of the OpenTelemetry
semantic conventions for generative AI, version 1.44.0 (as the Python package
``opentelemetry-semantic-conventions`` 0.66b2 ships them; a test checks them against the
installed package). They are written out here rather than imported
from that package: its generative-AI names are still "incubating" (a private module), and
a name that moves there must not break a turn. ``phaseflow.*`` names are this project's.
"""

from __future__ import annotations

from typing import Final

#: the semantic conventions these names follow (also the tracer's schema URL)
SEMCONV_VERSION: Final = "1.44.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# --- the GenAI conventions ---------------------------------------------------------------
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
AGENT_NAME: Final = "gen_ai.agent.name"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

# --- metrics -----------------------------------------------------------------------------
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TURN_DURATION: Final = "phaseflow.turn.duration"
TOOL_DURATION: Final = "phaseflow.tool.duration"
TRANSITIONS: Final = "phaseflow.transitions"

#: the conventions' advised histogram buckets
TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
                        4194304, 16777216, 67108864)
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                           10.24, 20.48, 40.96, 81.92)

# --- phaseflow's own ---------------------------------------------------------------------
TURN: Final = "phaseflow.turn"
PHASE: Final = "phaseflow.phase"
TO_PHASE: Final = "phaseflow.phase.to"
TRIGGER: Final = "phaseflow.transition.trigger"
OUTCOME: Final = "phaseflow.transition.outcome"
TURN_STATUS: Final = "phaseflow.turn.status"
CONTINUES: Final = "phaseflow.turn.continues"
TOOL_STATUS: Final = "phaseflow.tool.status"
REQUEST_ID: Final = "phaseflow.request.id"
EVENTS: Final = "phaseflow.commit.events"
HOOK: Final = "phaseflow.hook.name"
TARGET: Final = "phaseflow.prepare.target"
LINK: Final = "phaseflow.link"
CALL_ID: Final = "phaseflow.call.id"
DECISION: Final = "phaseflow.approval.decision"
REASON: Final = "phaseflow.reason"
CODE: Final = "phaseflow.error.code"
ATTEMPT: Final = "phaseflow.retry.attempt"
DELAY: Final = "phaseflow.retry.delay"

#: the key of the traceparent that a stored event or a queued message carries
TRACE_KEY: Final = "trace"
#: the variable that asks for message contents (the GenAI instrumentations' own)
CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
