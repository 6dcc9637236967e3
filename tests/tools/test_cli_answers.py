"""The chorus commands read each API's answer as the model it publishes: a refusal is its
problem's title and detail (exit 1, 2 or 77), an answer that is not the published model is
the service being unusable (exit 69) naming the field, never a KeyError's traceback."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
import typer
from typer.testing import CliRunner

from chorus.contracts.api.gateway import Me
from chorus.tools.cli.options import EX_NOPERM, EX_UNAVAILABLE, ApiCall, HttpApi, api_answer, api_command
from chorus.tools.cli.status import dead_letter_depth


def client(status: int, body: object, content_type: str = "application/json") -> httpx.Client:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status, headers={"content-type": content_type}, content=json.dumps(body).encode()
        )

    return httpx.Client(base_url="http://api", transport=httpx.MockTransport(answer))


def exit_of(call: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(typer.Exit) as raised:
        call()
    return raised.value.exit_code, capsys.readouterr().err


def test_a_published_answer_is_the_model() -> None:
    me = api_answer(
        "t", client(200, {"principal": "sam", "role": "operator", "tier": None}), Me, "GET", "/v1/me"
    )
    assert me == Me(principal="sam", role="operator", tier=None)


def test_a_malformed_answer_exits_69_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    broken = client(200, {"principal": "sam", "tier": None})
    code, said = exit_of(lambda: api_answer("t", broken, Me, "GET", "/v1/me"), capsys)
    assert code == EX_UNAVAILABLE
    assert (
        "chorus t: GET http://api/v1/me answered 200" in said and "not its Me: /role: Field required" in said
    )


def test_a_refusal_is_its_problem(capsys: pytest.CaptureFixture[str]) -> None:
    problem = {"type": "about:blank", "title": "Forbidden", "status": 403, "detail": "operators only"}
    refused = client(403, problem, "application/problem+json")
    code, said = exit_of(lambda: api_answer("t", refused, Me, "GET", "/v1/me"), capsys)
    assert (code, said.strip()) == (EX_NOPERM, "chorus t: Forbidden: operators only")


async def test_status_says_when_the_dead_letter_groups_are_not_what_the_service_publishes() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"groups": [{"service": "x", "status": "open"}]})

    transport = httpx.MockTransport(answer)
    original = httpx.AsyncClient.__init__

    def with_transport(self: httpx.AsyncClient, *args: object, **kwargs: object) -> None:
        original(self, *args, transport=transport, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.AsyncClient, "__init__", with_transport)
        found = await dead_letter_depth("http://dl", "key", 1.0)
    assert isinstance(found, str) and "not its GroupList" in found and "/groups/0/category" in found


def test_a_command_of_an_api_takes_its_url_key_and_output_options() -> None:
    """``api_command`` gives every command of an API the same --url, --api-key, --output and
    --json, and hands them to the command as one ApiCall."""
    app = typer.Typer(name="t")
    api = HttpApi("the test service", "CHORUS_TEST_URL", "http://default", "The test service.")
    asked: list[httpx.Request] = []

    @api_command(app, "me", api)
    def me_command(call: ApiCall, greeting: str = "hello") -> None:
        me = call.answer(Me, "GET", "/v1/me")
        if call.printed(me):
            return
        typer.echo(f"{greeting} {me.principal}")

    @app.command("other")
    def other_command() -> None: ...

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json={"principal": "sam", "role": "operator", "tier": None})

    original = httpx.Client.__init__

    def with_transport(self: httpx.Client, *args: object, **kwargs: object) -> None:
        original(self, *args, transport=httpx.MockTransport(answer), **kwargs)  # type: ignore[arg-type]

    runner = CliRunner()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.Client, "__init__", with_transport)
        table = runner.invoke(app, ["me", "--greeting", "hi"], env={"CHORUS_API_KEY": "k1"})
        as_json = runner.invoke(app, ["me", "--json", "--url", "http://elsewhere", "--api-key", "k2"])
        env = {"CHORUS_TEST_URL": "http://env", "CHORUS_API_KEY": "k3"}
        output_json = runner.invoke(app, ["me", "--output", "json"], env=env)
        no_key = runner.invoke(app, ["me"], env={"CHORUS_API_KEY": ""})
    assert (table.exit_code, table.output) == (0, "hi sam\n")
    assert as_json.exit_code == 0 and json.loads(as_json.output)["principal"] == "sam"
    assert output_json.exit_code == 0 and json.loads(output_json.output)["principal"] == "sam"
    assert no_key.exit_code == 2  # a usage error: nothing is asked
    assert [(str(r.url), r.headers["authorization"]) for r in asked] == [
        ("http://default/v1/me", "Bearer k1"),
        ("http://elsewhere/v1/me", "Bearer k2"),
        ("http://env/v1/me", "Bearer k3"),
    ]
