"""What the notifier decides, without I/O: who is told what about an approval (its tier's
reviewers) or about a workflow (the person who submitted it), and the words of each
message (e-mail and a Slack-compatible webhook).

Messages carry no personal data of the workflow's subject (no summary, no amounts):
the workflow and approval ids, the tier, the window, and a signed link to the console,
where a signed-in reviewer sees the review context.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from chorus.base.compat import StrEnum

SERVICE = "notifier"


class NoticeKind(StrEnum):
    WAITING = "waiting"
    """An approval waits on a tier (the first of its chain)."""
    ESCALATED = "escalated"
    """The previous tier's window passed: the next tier decides now."""
    WITHDRAWN = "withdrawn"
    """The workflow ended while its approval was open: nothing to decide any more."""
    SUBMISSION_ENDED = "submission_ended"
    """To its submitter: the workflow ended, and how."""
    SUBMISSION_WAITING = "submission_waiting"
    """To its submitter (opted in): the workflow waits for a person."""

    @property
    def to_submitter(self) -> bool:
        return self in (NoticeKind.SUBMISSION_ENDED, NoticeKind.SUBMISSION_WAITING)


class Channel(StrEnum):
    EMAIL = "email"
    """To each reviewer of the tier with an address (recipient: the principal), or to the
    submitter (recipient: ``submitter:<principal>``)."""
    WEBHOOK = "webhook"
    """To the tier's channel (recipient: ``tier:<tier>``), or to the submitter's
    (``submitter:<principal>``)."""


SUBMITTER = "submitter:"
"""The prefix of a submitter's recipient: one person may review and submit, and hears
of both apart (a delivery's id is its event's and its recipient's)."""


class Notice(BaseModel):
    """What one message is about (stored with each delivery: the sender renders it)."""

    model_config = ConfigDict(frozen=True)

    kind: NoticeKind
    workflow_id: str
    workflow_type: str
    approval_id: str = ""
    """The approval it is about ("" for an end told to the submitter)."""
    tier: str = ""
    level: int = 0
    waiting_until: datetime | None = None
    outcome: str | None = None
    """How the workflow ended (WITHDRAWN, SUBMISSION_ENDED)."""
    traceparent: str | None = None
    """The event that asked for the message: its sending joins that workflow's trace."""

    @property
    def link_path(self) -> str | None:
        """The console page a link leads to (none once there is nothing to decide)."""
        if self.kind.to_submitter:
            return f"/workflows/{self.workflow_id}"
        return None if self.kind is NoticeKind.WITHDRAWN else f"/approvals/{self.approval_id}"


class OpenApproval(BaseModel):
    model_config = ConfigDict(frozen=True)

    tier: str
    level: int


class NotifierState(BaseModel):
    """Per workflow: its approvals still open, and who was told last (a workflow that
    ends tells them it is withdrawn); who submitted it, when they are to be told."""

    approvals: dict[str, OpenApproval] = {}
    submitter: str | None = None
    """The principal that submitted it, when CHORUS_SUBMITTERS can reach them."""


@dataclass(frozen=True)
class Recipient:
    channel: Channel
    recipient: str


def recipients(
    tier: str, reviewers: Mapping[str, str | None], tier_webhooks: Mapping[str, str]
) -> list[Recipient]:
    """Who hears of an approval of ``tier``: every reviewer of it with an address
    (``reviewers``: principal -> tier, or None for a reviewer of no tier) and its channel."""
    found = [
        Recipient(Channel.EMAIL, principal) for principal, their in sorted(reviewers.items()) if their == tier
    ]
    if tier in tier_webhooks:
        found.append(Recipient(Channel.WEBHOOK, f"tier:{tier}"))
    return found


def submitter_recipients(principal: str, email: bool, webhook: bool) -> list[Recipient]:
    """How the submitter ``principal`` hears of their workflow: each channel they have."""
    channels = [c for c, has in ((Channel.EMAIL, email), (Channel.WEBHOOK, webhook)) if has]
    return [Recipient(channel, f"{SUBMITTER}{principal}") for channel in channels]


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at else "no set time"


def subject_line(notice: Notice) -> str:
    kind = {
        NoticeKind.WAITING: "Approval needed",
        NoticeKind.ESCALATED: "Escalated to you",
        NoticeKind.WITHDRAWN: "No longer needed",
        NoticeKind.SUBMISSION_ENDED: f"Ended ({notice.outcome})",
        NoticeKind.SUBMISSION_WAITING: "Waiting for a person",
    }[notice.kind]
    return f"[Chorus] {kind}: {notice.workflow_type} {notice.workflow_id}"


def message_text(notice: Notice, link: str | None) -> str:
    """The plain-text body (e-mail) and the webhook's ``text``."""
    if notice.kind.to_submitter:
        opening = (
            f"Your {notice.workflow_type} workflow {notice.workflow_id} ended: {notice.outcome}."
            if notice.kind is NoticeKind.SUBMISSION_ENDED
            else (
                f"Your {notice.workflow_type} workflow {notice.workflow_id} waits for a person: "
                f"approval {notice.approval_id} is with the {notice.tier} tier "
                f"(until {_when(notice.waiting_until)})."
            )
        )
        return f"{opening}\n\nSee it (sign-in required): {link}" if link else opening
    if notice.kind is NoticeKind.WITHDRAWN:
        return (
            f"The {notice.workflow_type} workflow {notice.workflow_id} ended ({notice.outcome}) while "
            f"approval {notice.approval_id} waited on the {notice.tier} tier: there is nothing to decide."
        )
    opening = (
        f"An approval waits on the {notice.tier} tier"
        if notice.kind is NoticeKind.WAITING
        else f"The previous tier did not answer in time: approval now waits on the {notice.tier} tier"
    )
    lines = [
        f"{opening} (step {notice.level + 1}).",
        f"Workflow: {notice.workflow_type} {notice.workflow_id}",
        f"Approval: {notice.approval_id}",
        f"Decide by: {_when(notice.waiting_until)} (then it escalates or falls back)",
    ]
    if link:
        lines += ["", f"Review and decide (sign-in required): {link}"]
    return "\n".join(lines)


def webhook_body(notice: Notice, link: str | None) -> dict[str, object]:
    """A Slack incoming-webhook message: ``text`` for notifications and clients without
    blocks, the same words in a section, and a button to the console."""
    text = message_text(notice, None)
    blocks: list[dict[str, object]] = [
        {"type": "header", "text": {"type": "plain_text", "text": subject_line(notice)[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
    ]
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {
                            "type": "plain_text",
                            "text": "Open" if notice.kind.to_submitter else "Review",
                        },
                        "url": link,
                        "style": "primary",
                    }
                ],
            }
        )
    return {"text": f"{subject_line(notice)}\n{message_text(notice, link)}", "blocks": blocks}
