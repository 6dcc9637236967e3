"""``chorus workflows``: act on running workflows through the gateway's API.

``--url`` (else CHORUS_GATEWAY_URL, else http://127.0.0.1:8080) and your API key
(``--api-key``, else CHORUS_API_KEY): the submitter's own, or an operator's.

Exit codes: 0 ok; 1 refused (unknown workflow, or it ended otherwise first); 2 bad
input; 69 the gateway is unreachable; 77 the key or its role may not do this.
"""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import quote

import typer

from chorus_tools.cli.options import ApiKeyOption, api_call, api_client

DEFAULT_URL = "http://127.0.0.1:8080"

app = typer.Typer(name="workflows", help="Workflows: cancel (more to come).", no_args_is_help=True)

Url = Annotated[
    str,
    typer.Option("--url", envvar="CHORUS_GATEWAY_URL", show_envvar=True, help="The gateway's API."),
]


@app.command("cancel")
def cancel_command(
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id (the submission's answer).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (required; the submitter sees it).")],
    api_key: ApiKeyOption = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")] = False,
    url: Url = DEFAULT_URL,
) -> None:
    """Stop a running workflow: it ends as cancelled and its compensation runs (a reserved
    budget is released). Asking again is harmless: it answers with the first request."""
    with api_client("workflows", url, api_key, "the gateway") as client:
        path = f"/v1/workflows/{quote(workflow_id, safe='')}/cancel"
        answer = api_call("workflows", client, "POST", path, json={"reason": reason})
    if as_json:
        typer.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    typer.echo(
        f"{answer['workflow_id']}: {answer['status']} (asked by {answer['requested_by']} "
        f"at {answer['requested_at'][:19]}: {answer['reason']})"
    )
