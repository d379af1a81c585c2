"""``phaseflow run`` given what a hurried user gives it: a key with a line break from an
env file, a base URL without its scheme, a hooks module with the wrong values, a script
with a typo, a lease or a limit that is no number. Real processes; what is checked is
what the user sees (standard output and error, the exit status) and what is kept (the
store file's bytes, what ``phaseflow sessions`` prints)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.fake_openai_server import (
    Fail,
    FakeOpenAIServer,
    text_reply,
)
from tests.support.phaseflow_cli import PHASEFLOW, cli_env, run_phaseflow
from tests.support.run_cli import STORE_NOTICE, project, run

pytest.importorskip("openai")

KEY = "sk-proj-Zq81xT0pS3cr3tK3y"
#: what must never be seen: the key, or a recognisable part of it
KEY_PARTS = (KEY, KEY[8:], "Zq81xT0p")

BAD_KEYS = {
    "a trailing newline": KEY + "\n",
    "a trailing CRLF": KEY + "\r\n",
    "a non-ASCII letter": KEY[:10] + "é" + KEY[10:],
    "a space inside": KEY[:10] + " " + KEY[10:],
    "a tab at the end": KEY + "\t",
}


def sessions(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_phaseflow("sessions", *args, cwd=cwd, env=cli_env())


def assert_no_secret(cwd: Path, *outputs: str, secrets: tuple[str, ...] = KEY_PARTS) -> None:
    """No part of a secret in any output, nor in any file the run left (the store)."""
    for secret in secrets:
        for output in outputs:
            assert secret not in output, output
        for path in cwd.iterdir():
            if path.is_file() and path.suffix not in (".py", ".yaml"):
                assert secret.encode() not in path.read_bytes(), path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("phaseflow run: error: "), proc.stderr
    return lines[0].removeprefix("phaseflow run: error: ")


# --- the key and the server ---------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_a_key_that_cannot_be_a_header_is_exit_2_at_start_and_never_shown(
        case: str, tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    cwd = project(tmp_path)
    started = time.monotonic()
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url", fake_openai.base_url,
               "--tools", "desk_tools:TOOLS", "-m", "hi",
               env=cli_env(OPENAI_API_KEY=BAD_KEYS[case]))
    assert time.monotonic() - started < 20  # not retried for seconds as a network failure
    message = one_error_line(proc)
    assert message.startswith("OPENAI_API_KEY: "), message
    assert "(the value is not shown)" in message
    assert fake_openai.requests == []  # nothing was sent
    assert not (cwd / "phaseflow-sessions.db").exists()  # nothing was created
    assert_no_secret(cwd, proc.stdout, proc.stderr)


def test_a_trailing_newline_is_named_as_such(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "-m", "hi",
               env=cli_env(OPENAI_API_KEY=KEY + "\n"))
    assert one_error_line(proc).startswith("OPENAI_API_KEY: ends with a line break")


@pytest.mark.parametrize("url", ["127.0.0.1:8080/v1", "localhost/v1", "ftp://host/v1"])
def test_a_base_url_without_http_is_exit_2_naming_the_option(tmp_path: Path,
                                                              url: str) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url", url, "-m", "hi")
    assert one_error_line(proc).startswith(f"--base-url: '{url}'")
    proc = run(cwd, "desk.yaml", "--model", "m", "-m", "hi",
               env=cli_env(OPENAI_BASE_URL=url))
    assert one_error_line(proc).startswith(f"OPENAI_BASE_URL: '{url}'")
    assert not (cwd / "phaseflow-sessions.db").exists()


def test_a_schemeless_url_suggests_the_scheme_and_hides_credentials(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url",
               "ada:pw-hidden-9@127.0.0.1:8080/v1", "-m", "hi")
    message = one_error_line(proc)
    assert "write http://127.0.0.1:8080/v1" in message
    assert "pw-hidden-9" not in message and "ada" not in message


def test_a_refused_connection_names_the_server_and_never_a_secret(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    port = free_port()
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url",
               f"http://ada:pw-hidden-9@127.0.0.1:{port}/v1", "--tools", "desk_tools:TOOLS",
               "--session", "s-1", "-m", "hi", env=cli_env(OPENAI_API_KEY=KEY))
    assert proc.returncode == 1, proc.stderr
    url = f"http://127.0.0.1:{port}/v1"
    retries = [line for line in proc.stdout.splitlines() if "retrying" in line]
    assert retries and all(f"the connection to the model server at {url} failed" in line
                           for line in retries)
    assert f"  error provider_error: the connection to the model server at {url} failed" \
        in proc.stdout
    shown = sessions(cwd, "show", "s-1")
    listed = sessions(cwd, "events", "s-1", "--json")
    assert shown.returncode == listed.returncode == 0
    assert url in listed.stdout
    assert_no_secret(cwd, proc.stdout, proc.stderr, shown.stdout, listed.stdout,
                     secrets=(*KEY_PARTS, "pw-hidden-9"))


def test_a_server_that_echoes_the_key_is_redacted_everywhere(
        tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(Fail(401, f"Incorrect API key provided: {KEY}.",
                          type="invalid_request_error"))
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url", fake_openai.base_url,
               "--tools", "desk_tools:TOOLS", "--session", "s-1", "--json", "-m", "hi",
               env=cli_env(OPENAI_API_KEY=KEY))
    assert proc.returncode == 1, proc.stderr
    errors = [e for e in map(json.loads, proc.stdout.splitlines()) if e["type"] == "error"]
    assert [e["message"] for e in errors] == [
        "the server answered 401: Incorrect API key provided: ***."]
    shown = sessions(cwd, "show", "s-1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert_no_secret(cwd, proc.stdout, proc.stderr, shown.stdout)
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {KEY}"


# --- the output limit ----------------------------------------------------------------------

def test_max_tokens_reaches_the_wire(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("Short."))
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url", fake_openai.base_url,
               "--tools", "desk_tools:TOOLS", "--store", "memory", "--max-tokens", "50",
               "-m", "hi")
    assert proc.returncode == 0, proc.stderr
    assert fake_openai.requests[0].body["max_completion_tokens"] == 50


def test_without_max_tokens_no_limit_is_sent(tmp_path: Path,
                                             fake_openai: FakeOpenAIServer) -> None:
    fake_openai.push(text_reply("Short."))
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--model", "m", "--base-url", fake_openai.base_url,
               "--tools", "desk_tools:TOOLS", "--store", "memory", "-m", "hi")
    assert proc.returncode == 0, proc.stderr
    body = fake_openai.requests[0].body
    assert "max_completion_tokens" not in body and "max_tokens" not in body


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "many", ""])
def test_max_tokens_is_a_positive_integer(tmp_path: Path, value: str) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--max-tokens",
               value, "-m", "hi")
    assert one_error_line(proc) == f"--max-tokens: expected a positive integer, got {value!r}"


def test_a_scripted_model_accepts_max_tokens_and_ignores_it(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- A reply written in advance, longer than two tokens.\n")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
               "desk_tools:TOOLS", "--store", "memory", "--max-tokens", "2", "-m", "hi")
    assert proc.returncode == 0, proc.stderr
    assert "agent: A reply written in advance, longer than two tokens." in proc.stdout


# --- the lease -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_lease_is_a_positive_number_of_seconds(tmp_path: Path, value: str) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--lease", value,
               "-m", "hi")
    assert one_error_line(proc) == (
        f"--lease: expected a positive number of seconds, got {value!r}")


GATED = '''\
import time
from pathlib import Path
from phaseflow.tools import tool

@tool(name="slow.wait")
def wait() -> str:
    Path("started").touch()
    deadline = time.monotonic() + 60
    while not Path("go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "waited"

TOOLS = [wait]
'''


def test_the_lease_given_is_the_one_another_worker_sees(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- calls: [{slow.wait: {}}]\n- Done.\n- Hello.\n")
    (cwd / "gated.py").write_text(GATED, encoding="utf-8")
    args = ["desk.yaml", "--provider", "scripted:script.yaml", "--tools", "gated:TOOLS",
            "--store", "s.db", "--session", "L"]
    holder = subprocess.Popen(
        [*PHASEFLOW, "run", *args, "--lease", "7",
         "-m", "wait"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=cli_env())
    try:
        deadline = time.monotonic() + 60
        while not (cwd / "started").exists():
            assert holder.poll() is None, holder.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        other = run(cwd, *args, "-m", "hello?")
        assert other.returncode == 0, other.stderr
        notice = other.stdout.strip()
        assert notice.startswith("[session L is busy: worker "), notice
        left = int(notice.split("(its lease ends in ")[1].split(" s)")[0])
        assert 0 <= left <= 7  # not the default 30
    finally:
        (cwd / "go").touch()
        holder.communicate(timeout=60)
    assert holder.returncode == 0


# --- tools and hooks -----------------------------------------------------------------------

HOSTS = '''\
def fetch(ctx, **arguments):
    return {}

def pay(amount: float) -> dict:
    return {"paid": True}

HOOKS_NOT_CALLABLE = {"fetch": fetch, "notify": 42}
HOOKS_A_LIST = [fetch]
HOOKS_BAD_NAME = {7: fetch}
TOOLS_NOT_CALLABLE = [pay, "slow.wait"]
TOOLS_MAPPING_NOT_CALLABLE = {"pay": pay, "slow.wait": None}
TOOLS_A_STRING = "pay"
'''


@pytest.mark.parametrize(("option", "attr", "problem"), [
    ("--hooks", "HOOKS_NOT_CALLABLE", "'notify' is not a callable but int 42"),
    ("--hooks", "HOOKS_A_LIST", "expected a mapping from name to callable, got list"),
    ("--hooks", "HOOKS_BAD_NAME", "a hook name must be a non-empty string, not int 7"),
    ("--tools", "TOOLS_NOT_CALLABLE",
     "entry 2 is not a tool (a @tool function or a callable) but str 'slow.wait'"),
    ("--tools", "TOOLS_MAPPING_NOT_CALLABLE",
     "'slow.wait' is not a callable but NoneType None"),
    ("--tools", "TOOLS_A_STRING", "expected a list of tools or a mapping"),
])
def test_a_wrong_tools_or_hooks_value_is_exit_2_naming_the_option_and_the_entry(
        tmp_path: Path, option: str, attr: str, problem: str) -> None:
    cwd = project(tmp_path)
    (cwd / "hosts.py").write_text(HOSTS, encoding="utf-8")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", option,
               f"hosts:{attr}", "-m", "hi")
    message = one_error_line(proc)
    assert message.startswith(f"{option} hosts:{attr}: {problem}"), message
    assert not (cwd / "phaseflow-sessions.db").exists()


# --- a script's typo -----------------------------------------------------------------------

def test_a_scripted_call_of_an_unknown_tool_gets_a_did_you_mean(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- Hello.\n- calls:\n    - pya: {amount: 5}\n- Sorry.\n")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
               "desk_tools:TOOLS", "--store", "memory", "-m", "hi", "-m", "pay 5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "phaseflow run: warning: script.yaml:3: reply 2 calls 'pya', which is not a tool "
        "of the workflow; did you mean 'pay'? (the session refuses the call)")
    assert "  < pya: refused" in proc.stdout  # the run itself goes on as before


def test_a_script_naming_known_tools_and_builtins_gets_no_warning(tmp_path: Path) -> None:
    cwd = project(tmp_path, "- calls: [{go_to_phase: {phase: finished, reason: x}}]\n"
                            "- calls: [{pay: {amount: 1}}]\n- Done.\n")
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
               "desk_tools:TOOLS", "--store", "memory", "--approve", "all", "-m", "hi")
    assert "warning" not in proc.stderr, proc.stderr


# --- where the sessions are kept -----------------------------------------------------------

def test_the_store_file_a_run_creates_is_named_once_on_standard_error(
        tmp_path: Path) -> None:
    cwd = project(tmp_path, "- Hello.\n- Again.\n")
    args = ("desk.yaml", "--provider", "scripted:script.yaml", "--tools",
            "desk_tools:TOOLS", "--session", "s-1", "--json")
    first = run(cwd, *args, "-m", "hi")
    assert first.returncode == 0, first.stderr
    store = cwd / "phaseflow-sessions.db"
    assert store.exists()
    notices = [line for line in first.stderr.splitlines() if line.startswith(STORE_NOTICE)]
    assert notices == [f"{STORE_NOTICE}{store} (a new file; --store names another, "
                       "'phaseflow sessions list' shows them)"]
    for line in first.stdout.splitlines():  # standard output stays JSON
        json.loads(line)
    again = run(cwd, *args, "-m", "again")
    assert again.returncode == 0, again.stderr
    assert STORE_NOTICE not in again.stderr  # once: the file is there now
    named = run(cwd, *args, "--store", "other.db", "-m", "hi")
    assert STORE_NOTICE not in named.stderr  # a store the user named is not announced


def test_no_messages_leaves_no_store_file_behind(tmp_path: Path) -> None:
    cwd = project(tmp_path)
    proc = run(cwd, "desk.yaml", "--provider", "scripted:script.yaml", "--tools",
               "desk_tools:TOOLS", stdin="")
    assert one_error_line(proc).startswith("no messages")
    assert not (cwd / "phaseflow-sessions.db").exists()


@pytest.mark.parametrize(("options", "message"), [
    (["--lease", "inf"], "--lease: expected a positive number of seconds, got 'inf'"),
    (["--lease", "0"], "--lease: expected a positive number of seconds"),
    (["--max-tokens", "-3"], "--max-tokens: expected a positive integer"),
    (["--base-url", "localhost:8000"], "--base-url"),
    (["--hooks", "examples.demo.refund_desk:TOOLS"], "--hooks examples.demo.refund_desk:TOOLS"),
])
def test_recover_checks_its_agent_options_as_run_does(tmp_path: Path, options: list[str],
                                                      message: str) -> None:
    """``sessions recover`` builds its agent from the same options as ``run``, read by
    the same rules: each bad value is exit 2 with one line naming the option."""
    store = tmp_path / "s.db"
    done = subprocess.run(
        [*PHASEFLOW, "sessions", "recover", "--store",
         str(store), "--workflow", "workflows/refund-desk.yaml", "--provider", "openai",
         "--model", "m", *options],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=60,
        env=cli_env(OPENAI_API_KEY="sk-test"))
    assert done.returncode == 2, done
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_run_refuses_at_start_what_would_fail_later(tmp_path: Path) -> None:
    """Checks a host expects at start: a ``call`` effect with no hook, and a tool whose
    function cannot take its catalogue entry's ``parameters``: exit 2, one line, before
    any model is asked (here: no script would even be read)."""
    repo = Path(__file__).resolve().parents[2]
    base = [*PHASEFLOW, "run", "workflows/refund-desk.yaml",
            "--provider", "scripted:examples/demo/refund-desk.script.yaml", "--store",
            "memory", "-m", "hi"]
    no_hooks = subprocess.run([*base, "--tools", "examples.demo.refund_desk:TOOLS"],
                              capture_output=True, text=True, cwd=repo, timeout=60,
                              env=cli_env())
    assert no_hooks.returncode == 2, no_hooks
    assert "no callable for the workflow's call effect(s) 'request_manager_approval'" in (
        no_hooks.stderr)
    (tmp_path / "narrow_tools.py").write_text(
        "from phaseflow.tools import tool\n\n"
        "@tool(name='crm.lookup_customer')\n"
        "def lookup(email: str) -> dict:\n"
        "    return {}\n\nTOOLS = [lookup]\n", encoding="utf-8")
    narrow = subprocess.run(
        [*base, "--tools", "narrow_tools:TOOLS", "--hooks", "examples.demo.refund_desk:HOOKS"],
        capture_output=True, text=True, cwd=repo, timeout=60,
        env=cli_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{repo}"))
    assert narrow.returncode == 2, narrow
    assert ("tool 'crm.lookup_customer' does not fit the parameters its catalogue entry "
            "declares: the function has no parameter for the declared argument(s) 'phone'"
            ) in narrow.stderr
    for out in (no_hooks, narrow):
        assert "Traceback" not in out.stderr and out.stdout == ""
