"""Hostile input: every file finishes fast, with diagnostics, never a crash or a side effect.

The nastiest inputs run through the real command in a subprocess with a timeout, so a
hang or a C stack overflow fails the test instead of killing the suite.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from phaseflow.spec.diagnostics import CODES
from phaseflow.spec.loader import check_text
from tests.support.phaseflow_cli import RunCli

SPEC_EXAMPLE = (Path(__file__).parent / "data" / "refund_desk.yaml").read_text()


def validate_file(tmp_path: Path, run: RunCli, content: str | bytes,
                  timeout: float = 30) -> dict[str, object]:
    path = tmp_path / "hostile.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    proc = run("validate", "--format", "json", str(path), timeout=timeout)
    assert "Traceback" not in proc.stderr
    assert proc.stderr == ""
    assert proc.returncode in (0, 1)
    data: dict[str, object] = json.loads(proc.stdout)
    for d in data["diagnostics"]:  # type: ignore[attr-defined]
        assert d["code"] in CODES and d["line"] >= 1 and d["column"] >= 1
        assert len(d["message"]) < 1000
    return data


def codes(data: dict[str, object]) -> list[str]:
    return [d["code"] for d in data["diagnostics"]]  # type: ignore[attr-defined]


def billion_laughs(levels: int = 10) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_billion_laughs(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    data = validate_file(tmp_path, phaseflow_cli, billion_laughs(), timeout=20)
    assert codes(data) == ["PF002"]
    assert "alias bomb" in data["diagnostics"][0]["message"]  # type: ignore[index]


def test_alias_bomb_inside_a_workflow(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    bomb = billion_laughs().replace("\n", "\n  ").rstrip()
    text = ("phaseflow: 1\nname: x\ninitial: a\nphases: {a: {goal: g, terminal: true}}\n"
            f"navigation:\n  {bomb}\n")
    data = validate_file(tmp_path, phaseflow_cli, text, timeout=20)
    assert codes(data) == ["PF002"]


def test_aliases_of_normal_size_are_fine() -> None:
    text = SPEC_EXAMPLE.replace("  escalate:\n    goal: Hand the conversation to a human agent.",
                                "  escalate:\n    goal: &g Hand the conversation to a human agent.")
    text += "  extra:\n    goal: *g\n    terminal: true\n"
    result = check_text(text)
    assert [d.code for d in result.diagnostics] == ["PF202"]  # 'extra' is unreachable


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        "{a: " * 100_000 + "}" * 100_000,
        "- " * 50_000 + "x\n",
        "".join(" " * i + "a:\n" for i in range(3000)),
    ],
    ids=["open-brackets", "balanced-brackets", "flow-mappings", "block-seq", "block-maps"],
)
def test_deep_nesting(text: str, tmp_path: Path, phaseflow_cli: RunCli) -> None:
    data = validate_file(tmp_path, phaseflow_cli, text, timeout=20)
    assert len(codes(data)) == 1
    assert codes(data)[0] in ("PF002", "PF103")
    if codes(data) == ["PF103"]:
        assert "nested more than 64 levels" in data["diagnostics"][0]["message"]  # type: ignore[index]


def test_nesting_just_under_the_limit_is_read() -> None:
    deep = "{a: " * 60 + "1" + "}" * 60
    text = SPEC_EXAMPLE + f"navigation: {{template: x, history: 1}}\nx-extra: {deep}\n"
    diags = check_text(text).diagnostics
    assert [d.code for d in diags] == ["PF102"]  # read to the end: only the unknown key


@pytest.mark.parametrize("seed", range(5))
def test_random_binary_garbage(seed: int, tmp_path: Path, phaseflow_cli: RunCli) -> None:
    rng = random.Random(seed)
    data = validate_file(tmp_path, phaseflow_cli, rng.randbytes(20_000))
    assert codes(data)[0] in ("PF001", "PF002")
    assert data["errors"] >= 1


def test_nul_bytes_and_control_characters() -> None:
    for text in ("phaseflow: 1\x00\n", "\x00" * 1000, "name: a\x1bb\n"):
        diags = check_text(text).diagnostics
        assert diags and diags[0].code == "PF002", text
        assert diags[0].line >= 1 and diags[0].column >= 1


def test_non_utf8_file(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    data = validate_file(tmp_path, phaseflow_cli, SPEC_EXAMPLE.encode() + b"\n# \xc3\x28\n")
    assert codes(data) == ["PF001"]
    assert data["diagnostics"][0]["line"] == SPEC_EXAMPLE.count("\n") + 2  # type: ignore[index]


def big_workflow(phases: int) -> str:
    lines = ["phaseflow: 1", "name: big", "initial: p0", "state:", "  counter: {type: integer}",
             "phases:"]
    for i in range(phases):
        lines += [
            f"  p{i}:",
            f"    goal: Phase number {i} of a long and winding conversation.",
            f"    instructions: Step {i}; the counter is {{{{ state.counter }}}}.",
            "    transitions:",
        ]
        if i + 1 < phases:
            lines += [f"      - to: p{i + 1}", f"        when: state.counter > {i}",
                      "        description: onwards"]
            lines += ["      - to: p0", "        trigger: model"]
        else:
            lines[-1] = "    terminal: true"
    return "\n".join(lines) + "\n"


def test_multi_megabyte_valid_workflow(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    text = big_workflow(5000)
    assert len(text) > 1_000_000
    start = time.perf_counter()
    data = validate_file(tmp_path, phaseflow_cli, text, timeout=60)
    elapsed = time.perf_counter() - start
    assert data == {"files": 1, "errors": 0, "warnings": 0, "diagnostics": []}
    assert elapsed < 30


def test_multi_megabyte_garbage(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    rng = random.Random(7)
    text = "".join(rng.choice("{}[]:,-&*!|>'\"#%@ \n\tab?") for _ in range(3_000_000))
    data = validate_file(tmp_path, phaseflow_cli, text, timeout=30)
    assert codes(data)[0] == "PF002"


def test_many_unknown_keys(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    text = "".join(f"k{i}: {i}\n" for i in range(20_000))
    data = validate_file(tmp_path, phaseflow_cli, text, timeout=30)
    assert codes(data).count("PF102") == 20_000


@pytest.mark.parametrize(
    "tagged",
    [
        '!!python/object/apply:os.system ["touch {marker}"]',
        '!!python/object/new:subprocess.Popen [["touch", "{marker}"]]',
        '!!python/name:os.system',
        '!!python/module:os',
        '!!python/object:pathlib.Path {{}}',
        '!custom "{marker}"',
        '!!binary aGVsbG8=',
        '!!set {{a, b}}',
        '!!timestamp 2024-01-01',
        '!<tag:example.com,2024:thing> "{marker}"',
    ],
)
def test_object_building_tags_are_refused(tagged: str, tmp_path: Path,
                                          phaseflow_cli: RunCli) -> None:
    marker = tmp_path / "pwned"
    value = tagged.format(marker=marker)
    for text in (f"{value}\n", f"phaseflow: 1\nname: {value}\n",
                 f"phaseflow: 1\nphases:\n  - {value}\n"):
        data = validate_file(tmp_path, phaseflow_cli, text)
        assert codes(data)[0] == "PF103", text
        assert "is not allowed" in data["diagnostics"][0]["message"]  # type: ignore[index]
    assert not marker.exists()


def test_standard_scalar_tags_are_read() -> None:
    text = SPEC_EXAMPLE.replace("phaseflow: 1", "phaseflow: !!int 1").replace(
        "name: refund-desk", "name: !!str refund-desk")
    assert check_text(text).diagnostics == ()
    bad = check_text(SPEC_EXAMPLE.replace("phaseflow: 1", 'phaseflow: !!int "one"'))
    assert [d.code for d in bad.diagnostics] == ["PF002"]


def test_code_in_guards_is_pf300_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "guard-pwned"
    for guard in (
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w')",
        "state.__class__.__mro__",
        "(lambda: 1)()",
        "[x for x in state]",
        "exec('1')",
        "state.x.clear()",
        "state.amount ** 999999999",
    ):
        text = SPEC_EXAMPLE.replace("when: state.refund_id", f"when: {json.dumps(guard)}")
        result = check_text(text)
        assert [d.code for d in result.diagnostics] == ["PF300"], guard
        assert result.workflow is None
    assert not marker.exists()


def test_jinja_ssti_in_instructions_renders_harmlessly() -> None:
    payloads = [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ state.__class__.__init__.__globals__ }}",
        "{{ workflow.__class__ }}",
        "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        "{{ state.update({'x': 1}) }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    ]
    for payload in payloads:
        text = SPEC_EXAMPLE.replace(
            "instructions: Ask for the email address on the account. Be brief.",
            f"instructions: {json.dumps(payload)}",
        )
        result = check_text(text)
        codes_found = [d.code for d in result.diagnostics]
        # either refused at load (unknown name 'cycler'), or loaded and harmless when rendered
        if result.workflow is None:
            assert codes_found in (["PF302"], ["PF304"]), payload
            continue
        template = result.workflow.phases["greet"].instructions
        assert template is not None
        state = {"customer_id": "c1"}
        rendered = template.render({"state": state, "phase": {"name": "greet", "goal": "g"},
                                    "workflow": {"name": "x"}, "turn": 1})
        assert state == {"customer_id": "c1"}
        # nothing leaks: an unsafe attribute reads as nothing, or the render says it is unsafe
        assert rendered == "" or (rendered.startswith("[template error:") and "unsafe" in rendered)
        assert "<class" not in rendered, (payload, rendered)


def test_huge_keys_and_long_lines(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    huge_key = "k" * 2_000_000 + ": 1\n"
    data = validate_file(tmp_path, phaseflow_cli, huge_key)
    assert codes(data)[0] in ("PF002", "PF102")
    explicit = "? " + "k" * 100_000 + "\n: 1\n"
    data = validate_file(tmp_path, phaseflow_cli, explicit)
    assert "PF102" in codes(data)
    long_line = SPEC_EXAMPLE.replace(
        "description: Verify a customer, find the order, refund it or escalate.",
        "description: " + "x" * 5_000_000)
    assert validate_file(tmp_path, phaseflow_cli, long_line)["diagnostics"] == []
    long_name = SPEC_EXAMPLE.replace("initial: greet", "initial: " + "g" * 1_000_000)
    assert codes(validate_file(tmp_path, phaseflow_cli, long_name)) == ["PF200"]


def test_huge_integer_is_not_converted() -> None:
    text = SPEC_EXAMPLE.replace("phaseflow: 1", "phaseflow: " + "9" * 100_000)
    diags = check_text(text).diagnostics
    assert [d.code for d in diags] == ["PF110"]
    assert len(diags[0].message) < 200


def test_recursive_aliases_are_unknown() -> None:
    for text in ("a: &a [*a]\n", "a: &a {b: *a}\n", "&a [*a]\n"):
        diags = check_text(text).diagnostics
        assert [d.code for d in diags] == ["PF002"]
        assert "unknown alias '*a'" in diags[0].message


def test_alias_used_as_a_key_is_refused() -> None:
    diags = check_text("base: &b {x: 1}\n*b : 2\n").diagnostics
    assert diags and diags[0].code in ("PF002", "PF103")


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"),
                    reason="needs /dev/zero and FIFOs (POSIX)")
def test_devices_and_fifos_are_refused_not_read(tmp_path: Path, phaseflow_cli: RunCli) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it for reading would block forever
    for path in ("/dev/zero", str(fifo)):
        proc = phaseflow_cli("validate", path, timeout=20)
        assert proc.returncode == 1
        assert f"{path}:1:1: error PF001 cannot read file: not a regular file" in proc.stdout
    # found by folder discovery, it is reported too, not waited on
    proc = phaseflow_cli("validate", str(tmp_path), timeout=20)
    assert "PF001" in proc.stdout and proc.returncode == 1
