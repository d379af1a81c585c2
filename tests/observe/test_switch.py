"""Tracing off costs nothing (nothing of OpenTelemetry is imported); the ``OTEL_*`` rule
of the CLI; a variable the CLI cannot follow is refused at start (exit 2, one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from phaseflow.cli.telemetry import wanted
from phaseflow.observe import names
from tests.support.phaseflow_cli import PHASEFLOW, cli_env

WORKFLOW = """\
phaseflow: 1
name: hello
initial: talk
phases:
  talk:
    goal: Talk.
"""


def test_a_host_without_tracing_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    (tmp_path / "hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    code = (
        "import sys\n"
        "from phaseflow import Agent, ScriptedProvider\n"
        "agent = Agent('hello.yaml', ScriptedProvider(['Hi.']))\n"
        "print(agent.session_sync('s').reply_sync('hello'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')\n"
        "             or m.startswith('phaseflow.observe.otel')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["Hi.", "[]"]


@pytest.mark.parametrize("extra", [{}, {"OTEL_SDK_DISABLED": "true",
                                        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
                                   {"OTEL_TRACES_EXPORTER": "none"}])
def test_phaseflow_run_without_tracing_imports_nothing_of_opentelemetry(
        tmp_path: Path, extra: dict[str, str]) -> None:
    (tmp_path / "hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text("- Hi.\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "phaseflow.cli.main", "run", "hello.yaml",
         "--provider", "scripted:script.yaml", "--store", "memory", "-m", "hello"],
        cwd=tmp_path, env=cli_env(**extra), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "Hi." in proc.stdout
    imported = [line for line in proc.stderr.splitlines() if "import time:" in line]
    assert imported, "importtime printed nothing"
    assert not [line for line in imported if "opentelemetry" in line]


@pytest.mark.parametrize(("variables", "message"), [
    ({"OTEL_TRACES_EXPORTER": "jaeger"},
     "OTEL_TRACES_EXPORTER='jaeger' is not an exporter phaseflow has (otlp, console or none)"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     "OTEL_EXPORTER_OTLP_PROTOCOL='grpc': phaseflow exports OTLP over HTTP (http/protobuf) "
     "only"),
])
def test_a_variable_the_cli_cannot_follow_is_refused_at_start(
        tmp_path: Path, variables: dict[str, str], message: str) -> None:
    (tmp_path / "hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text("- Hi.\n", encoding="utf-8")
    common = ("--provider", "scripted:script.yaml")
    for command, prog in (
            (("run", "hello.yaml", *common, "--store", "memory", "-m", "hello"),
             "phaseflow run"),
            (("sessions", "recover", "--workflow", "hello.yaml", *common, "--store",
              "none.db"), "phaseflow sessions recover")):
        proc = subprocess.run([*PHASEFLOW, *command],
                              cwd=tmp_path, env=cli_env(**variables), capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"{prog}: error: {message}\n"
        assert proc.stdout == ""


def test_the_rule_of_the_otel_variables() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert wanted({}) == ((), ())
    assert wanted(endpoint) == (("otlp",), ("otlp",))
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}) == (
        ("otlp",), ("otlp",))
    assert wanted({**endpoint, "OTEL_SDK_DISABLED": "TRUE"}) == ((), ())
    assert wanted({**endpoint, "OTEL_TRACES_EXPORTER": "none"}) == ((), ())
    assert wanted({**endpoint, "OTEL_METRICS_EXPORTER": "none"}) == (("otlp",), ())
    assert wanted({"OTEL_TRACES_EXPORTER": "console"}) == (("console",), ("console",))
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_METRICS_EXPORTER": "none"}
                  ) == (("otlp", "console"), ())
    assert wanted({**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == (
        ("otlp",), ("otlp",))
    with pytest.raises(ValueError, match="OTEL_METRICS_EXPORTER='prometheus'"):
        wanted({**endpoint, "OTEL_METRICS_EXPORTER": "prometheus"})


def test_the_genai_names_are_the_installed_semantic_conventions() -> None:
    from opentelemetry.semconv._incubating.attributes import (
        error_attributes,
        gen_ai_attributes,
        server_attributes,
    )
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
    from opentelemetry.semconv.schemas import Schemas

    for ours, theirs in [
        (names.OPERATION_NAME, gen_ai_attributes.GEN_AI_OPERATION_NAME),
        (names.PROVIDER_NAME, gen_ai_attributes.GEN_AI_PROVIDER_NAME),
        (names.AGENT_NAME, gen_ai_attributes.GEN_AI_AGENT_NAME),
        (names.CONVERSATION_ID, gen_ai_attributes.GEN_AI_CONVERSATION_ID),
        (names.REQUEST_MODEL, gen_ai_attributes.GEN_AI_REQUEST_MODEL),
        (names.REQUEST_MAX_TOKENS, gen_ai_attributes.GEN_AI_REQUEST_MAX_TOKENS),
        (names.RESPONSE_FINISH_REASONS, gen_ai_attributes.GEN_AI_RESPONSE_FINISH_REASONS),
        (names.USAGE_INPUT_TOKENS, gen_ai_attributes.GEN_AI_USAGE_INPUT_TOKENS),
        (names.USAGE_OUTPUT_TOKENS, gen_ai_attributes.GEN_AI_USAGE_OUTPUT_TOKENS),
        (names.TOKEN_TYPE, gen_ai_attributes.GEN_AI_TOKEN_TYPE),
        (names.TOOL_NAME, gen_ai_attributes.GEN_AI_TOOL_NAME),
        (names.TOOL_CALL_ID, gen_ai_attributes.GEN_AI_TOOL_CALL_ID),
        (names.TOOL_TYPE, gen_ai_attributes.GEN_AI_TOOL_TYPE),
        (names.TOOL_CALL_ARGUMENTS, gen_ai_attributes.GEN_AI_TOOL_CALL_ARGUMENTS),
        (names.TOOL_CALL_RESULT, gen_ai_attributes.GEN_AI_TOOL_CALL_RESULT),
        (names.INPUT_MESSAGES, gen_ai_attributes.GEN_AI_INPUT_MESSAGES),
        (names.OUTPUT_MESSAGES, gen_ai_attributes.GEN_AI_OUTPUT_MESSAGES),
        (names.SYSTEM_INSTRUCTIONS, gen_ai_attributes.GEN_AI_SYSTEM_INSTRUCTIONS),
        (names.SERVER_ADDRESS, server_attributes.SERVER_ADDRESS),
        (names.SERVER_PORT, server_attributes.SERVER_PORT),
        (names.ERROR_TYPE, error_attributes.ERROR_TYPE),
        (names.TOKEN_USAGE, gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE),
        (names.OPERATION_DURATION, gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION),
    ]:
        assert ours == theirs
    assert names.SCHEMA_URL in {s.value for s in Schemas}


def test_an_unreachable_collector_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.yaml").write_text("- Hi.\n", encoding="utf-8")
    proc = subprocess.run(
        [*PHASEFLOW, "run", "hello.yaml", "--provider",
         "scripted:script.yaml", "--store", "memory", "-m", "hello"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env=cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                        OTEL_EXPORTER_OTLP_TIMEOUT="1"))
    assert proc.returncode == 0, proc.stderr
    assert "Hi." in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("phaseflow: warning: OpenTelemetry could not export: ")
    assert lines[0].endswith("(later export warnings are not shown)")
