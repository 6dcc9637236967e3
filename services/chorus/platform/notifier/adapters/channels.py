"""How messages leave: SMTP (aiosmtplib) and Slack-compatible incoming webhooks (httpx).

Each send either returns (the server took it) or raises DeliveryError saying why; the
sender decides whether to try again. No retry in here: retries are durable rows.
"""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from urllib.parse import urlsplit

import aiosmtplib
import httpx

from chorus.base.tracing import outbound_span
from chorus.platform.notifier.config import Settings


class DeliveryError(Exception):
    """The channel did not take the message (server down, refused, timed out)."""


class Channels:
    def __init__(self, settings: Settings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http

    async def email(self, to_address: str, subject: str, text: str, message_key: str) -> None:
        s = self.settings
        if not s.smtp_host:
            raise DeliveryError("no mail server configured (CHORUS_SMTP_HOST)")
        message = EmailMessage()
        message["From"] = s.smtp_from
        message["To"] = to_address
        message["Subject"] = subject
        # One id per delivery: a message sent twice (a crash between send and record) is
        # recognisably the same message to the reader's mail client.
        message["Message-ID"] = make_msgid(idstring=message_key, domain="chorus.local")
        message.set_content(text)
        try:
            await aiosmtplib.send(
                message,
                hostname=s.smtp_host,
                port=s.smtp_port,
                start_tls=s.smtp_starttls,
                username=s.smtp_username,
                password=s.smtp_password.get_secret_value() if s.smtp_password else None,
                timeout=s.smtp_timeout_s,
            )
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"SMTP {s.smtp_host}:{s.smtp_port}: {exc}") from exc

    async def webhook(self, url: str, body: dict[str, object]) -> None:
        try:
            with outbound_span("notify webhook", "POST", urlsplit(url).hostname or "") as traceparent:
                response = await self.http.post(
                    url,
                    json=body,
                    timeout=self.settings.webhook_timeout_s,
                    headers={"traceparent": traceparent} if traceparent else None,
                )
        except httpx.HTTPError as exc:
            raise DeliveryError(f"webhook: {type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise DeliveryError(f"webhook answered {response.status_code}: {response.text[:200]}")
