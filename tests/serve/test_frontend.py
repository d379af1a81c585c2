"""``serve --app DIR``: a host's own front end at ``/app/`` on the server's origin,
public as the web view's pages are (no token for the files, a token for the API),
behind the ``Host`` check; a folder that is not one is refused at start."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.phaseflow_cli import cli_env, run_phaseflow
from tests.support.serve_server import REFUND_DESK, serving

TOKEN = "frontend-test-token-0123456789"


def test_app_files_are_served_beside_the_api(tmp_path: Path) -> None:
    app = tmp_path / "front"
    (app / "js").mkdir(parents=True)
    (app / "index.html").write_text("<!doctype html><title>mine</title>", encoding="utf-8")
    (app / "js" / "main.js").write_text("export const x = 1;\n", encoding="utf-8")
    with serving([*REFUND_DESK, "--store", "memory", "--app", str(app)],
                 tmp_path / "server.log", env=cli_env(PHASEFLOW_TOKENS=TOKEN)) as server, \
            httpx.Client(base_url=server.base, timeout=30) as client:
        page = client.get("/app/")  # no token: the files are public
        assert page.status_code == 200 and "<title>mine</title>" in page.text
        script = client.get("/app/js/main.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith(("text/javascript",
                                                          "application/javascript"))
        assert client.get("/app").status_code == 307  # to the folder's index
        for method, status, code in (("GET", 404, "not_found"),
                                     ("POST", 405, "method_not_allowed")):
            answer = client.request(method, "/app/nope.js")
            assert answer.status_code == status, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] == code
        assert client.get("/v1/sessions").status_code == 401  # the API wants its token
        assert client.get("/v1/sessions", headers={
            "Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/app/", headers={"Host": "evil.example"}).status_code == 421
    bad = run_phaseflow("serve", *REFUND_DESK, "--store", "memory", "--app",
                        str(tmp_path / "none"), env=cli_env())
    assert bad.returncode == 2 and "--app" in bad.stderr, bad.stderr
