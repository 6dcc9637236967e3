"""The notifier's API: what was sent to whom about an approval, and every attempt."""

from __future__ import annotations

from chorus.contracts.api.base import ApiModel, IsoDateTime


class DeliveryAttempt(ApiModel):
    attempt: int
    at: IsoDateTime
    ok: bool
    error: str | None
    duration_ms: float


class Notification(ApiModel):
    """One message to one recipient (a principal or a tier's channel), and its attempts."""

    delivery_id: str
    workflow_id: str
    approval_id: str
    kind: str
    level: int
    channel: str
    recipient: str
    status: str
    attempts: int
    next_attempt_at: IsoDateTime | None
    last_error: str | None
    created_at: IsoDateTime | None
    delivered_at: IsoDateTime | None
    attempt_log: list[DeliveryAttempt]


class Notifications(ApiModel):
    """``GET /v1/notifications``: messages about approvals, newest first."""

    notifications: list[Notification]
