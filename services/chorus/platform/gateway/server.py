"""Runs the FastAPI app inside the service process, beside the runtime's consumer."""

from __future__ import annotations

from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters.policy import ApprovalPolicyApi
from chorus.platform.gateway.adapters.readmodel import ReadModel
from chorus.platform.gateway.api import create_app
from chorus.web.apikeys import bearer
from chorus.web.http import EmbeddedServer, api_client, server_config


async def serve_api(rt: RuntimeHandle) -> None:
    settings = rt.settings
    # The gateway reads the audit projection as itself (a ``service`` key), whoever asks;
    # policy requests go to the approval gate with the caller's own key.
    headers = bearer(settings.audit_api_key.get_secret_value())
    async with api_client(headers=headers) as client, api_client() as forwarding:
        await _serve(
            rt,
            ReadModel(client, settings.audit_url),
            ApprovalPolicyApi(forwarding, settings.approval_gate_url),
        )


async def _serve(rt: RuntimeHandle, reads: ReadModel, policy: ApprovalPolicyApi) -> None:
    settings = rt.settings
    config = server_config(
        create_app(rt, settings, reads, policy),
        host=settings.api_host,
        port=settings.api_port,
        max_connections=settings.api_max_connections,
        keep_alive_s=settings.api_keep_alive_s,
    )
    server = EmbeddedServer(config)
    try:
        await server.serve()
    finally:
        server.should_exit = True
