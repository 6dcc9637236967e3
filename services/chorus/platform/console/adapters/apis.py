"""The public APIs the console is a client of, each called with the signed-in person's
own API key: the gateway (workflows, approvals, who am I), the dead-letter service,
outcome analytics and the notifier. The console has no other source of data.

Every answer is the model its service publishes (``chorus.contracts.api``); one that is
not (a bug or a version skew over there) is :class:`ApiUnavailable`, named, never a
``KeyError`` in a page."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from chorus.contracts.api.audit_projector import ApprovalTask
from chorus.contracts.api.base import ProblemDetails
from chorus.contracts.api.deadletter_service import (
    DiscardBody,
    Done,
    LetterDetail,
    LetterList,
    LetterSummary,
    RedriveBody,
)
from chorus.contracts.api.gateway import (
    ApprovalDetail,
    ApprovalQueue,
    BulkAction,
    BulkActions,
    CancelAccepted,
    CancelBody,
    DecisionAccepted,
    DecisionBody,
    Me,
    ResetAccepted,
    Schedule,
    ScheduleList,
    SearchAttributes,
    SignalSent,
    WorkflowPage,
    WorkflowSignals,
    WorkflowState,
)
from chorus.contracts.api.notifier import Notification, Notifications
from chorus.contracts.api.outcome_analytics import OutcomeBucket, Outcomes, ReleaseOutcomes, Releases
from chorus.web.typedclient import UnexpectedAnswerError, answer, answer_as

M = TypeVar("M", bound=BaseModel)


class ApiProblem(Exception):
    """The API refused (4xx): its problem+json title and detail, shown to the person."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status, self.title, self.detail = status, title, detail


class ApiUnavailable(Exception):
    """An API did not answer, answered 5xx, or answered what it does not publish: the page
    says which and to try again."""


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


UPDATE_WAIT_S = 70.0
"""Longer than any update's timeout (at most 60 s, workflows.yaml): its 202 arrives first."""


def request_body(model: type[M], **fields: Any) -> dict[str, Any]:
    """A request as the API's published model names its fields. The API validates it (and
    says what is wrong, shown to the person): the console does not refuse input first."""
    return model.model_construct(**fields).model_dump(mode="json")


class Apis:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        gateway: str,
        deadletters: str,
        analytics: str,
        notifier: str,
    ) -> None:
        self.client = client
        self.gateway = gateway.rstrip("/")
        self.deadletters = deadletters.rstrip("/")
        self.analytics = analytics.rstrip("/")
        self.notifier = notifier.rstrip("/")

    async def _call(self, key: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The API's successful answer; :class:`ApiProblem` for a refusal, else
        :class:`ApiUnavailable`."""
        where = url.split("/v1", maxsplit=1)[0]
        try:
            headers = {**kwargs.pop("headers", {}), "Authorization": f"Bearer {key}"}
            response = await self.client.request(method, url, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"{where} did not answer ({type(exc).__name__})") from exc
        if response.status_code >= 500:
            raise ApiUnavailable(f"{where} answered {response.status_code}")
        if response.status_code >= 400:
            try:
                problem = ProblemDetails.model_validate_json(response.content)
            except ValidationError:
                raise ApiProblem(response.status_code, "Refused", response.text[:300]) from None
            raise ApiProblem(response.status_code, problem.title, problem.detail)
        return response

    async def _get(self, model: type[M], key: str, method: str, url: str, **kwargs: Any) -> M:
        response = await self._call(key, method, url, **kwargs)
        try:
            return answer(model, response)
        except UnexpectedAnswerError as exc:
            raise ApiUnavailable(str(exc)) from None

    # -- the gateway --------------------------------------------------------------------------

    async def me(self, key: str) -> Me:
        return await self._get(Me, key, "GET", f"{self.gateway}/v1/me")

    async def approvals(self, key: str) -> list[ApprovalTask]:
        url = f"{self.gateway}/v1/approvals"
        return (await self._get(ApprovalQueue, key, "GET", url, params={"assignee": "me"})).approvals

    async def approval(self, key: str, approval_id: str) -> ApprovalDetail:
        return await self._get(
            ApprovalDetail, key, "GET", f"{self.gateway}/v1/approvals/{_path(approval_id)}"
        )

    async def decide(self, key: str, approval_id: str, decision: str, comment: str) -> DecisionAccepted:
        url = f"{self.gateway}/v1/approvals/{_path(approval_id)}"
        body = request_body(DecisionBody, decision=decision, comment=comment)
        return await self._get(DecisionAccepted, key, "POST", url, json=body)

    async def workflows(self, key: str, params: dict[str, Any]) -> WorkflowPage:
        return await self._get(WorkflowPage, key, "GET", f"{self.gateway}/v1/workflows", params=params)

    async def search_attributes(self, key: str) -> SearchAttributes:
        return await self._get(SearchAttributes, key, "GET", f"{self.gateway}/v1/search-attributes")

    async def workflow(self, key: str, workflow_id: str) -> WorkflowState:
        response = await self._call(key, "GET", f"{self.gateway}/v1/workflows/{_path(workflow_id)}")
        try:
            found: WorkflowState = answer_as(WorkflowState, response)
        except UnexpectedAnswerError as exc:
            raise ApiUnavailable(str(exc)) from None
        return found

    async def cancel(self, key: str, workflow_id: str, reason: str) -> CancelAccepted:
        url = f"{self.gateway}/v1/workflows/{_path(workflow_id)}/cancel"
        return await self._get(CancelAccepted, key, "POST", url, json=request_body(CancelBody, reason=reason))

    async def signals(self, key: str, workflow_id: str) -> WorkflowSignals:
        url = f"{self.gateway}/v1/workflows/{_path(workflow_id)}/signals"
        return await self._get(WorkflowSignals, key, "GET", url)

    async def send_signal(
        self, key: str, workflow_id: str, name: str, body: dict[str, Any], *, as_update: bool, sent_as: str
    ) -> SignalSent:
        """``sent_as`` (the form's own key) makes a form sent twice one signal. An update may
        wait for its answer up to a minute (its declared timeout): so may this call."""
        kind = "updates" if as_update else "signals"
        url = f"{self.gateway}/v1/workflows/{_path(workflow_id)}/{kind}/{_path(name)}"
        headers = {"Idempotency-Key": sent_as}
        return await self._get(
            SignalSent, key, "POST", url, json=body, headers=headers, timeout=UPDATE_WAIT_S
        )

    async def reset(self, key: str, workflow_id: str, body: dict[str, Any], *, sent_as: str) -> ResetAccepted:
        url = f"{self.gateway}/v1/workflows/{_path(workflow_id)}/reset"
        return await self._get(
            ResetAccepted, key, "POST", url, json=body, headers={"Idempotency-Key": sent_as}
        )

    async def signal(self, key: str, signal_id: str) -> SignalSent:
        return await self._get(SignalSent, key, "GET", f"{self.gateway}/v1/signals/{_path(signal_id)}")

    async def bulk_actions(self, key: str) -> list[BulkAction]:
        return (await self._get(BulkActions, key, "GET", f"{self.gateway}/v1/bulk-actions")).bulk_actions

    async def bulk_action(self, key: str, bulk_id: str) -> BulkAction:
        return await self._get(BulkAction, key, "GET", f"{self.gateway}/v1/bulk-actions/{_path(bulk_id)}")

    async def start_bulk(self, key: str, body: dict[str, Any], *, sent_as: str) -> BulkAction:
        """A bulk action, or its dry run; ``sent_as`` (the form's key) makes a form sent twice
        one action."""
        headers = {"Idempotency-Key": sent_as}
        return await self._get(
            BulkAction, key, "POST", f"{self.gateway}/v1/bulk-actions", json=body, headers=headers
        )

    async def schedules(self, key: str) -> list[Schedule]:
        return (await self._get(ScheduleList, key, "GET", f"{self.gateway}/v1/schedules")).schedules

    async def schedule(self, key: str, schedule_id: str) -> Schedule:
        return await self._get(Schedule, key, "GET", f"{self.gateway}/v1/schedules/{_path(schedule_id)}")

    async def act_on_schedule(self, key: str, schedule_id: str, action: str) -> Schedule:
        url = f"{self.gateway}/v1/schedules/{_path(schedule_id)}"
        if action == "delete":
            return await self._get(Schedule, key, "DELETE", url)
        return await self._get(Schedule, key, "POST", f"{url}/{_path(action)}")

    # -- the dead-letter service ----------------------------------------------------------------

    async def letters(self, key: str, params: dict[str, Any]) -> list[LetterSummary]:
        url = f"{self.deadletters}/v1/dead-letters"
        return (await self._get(LetterList, key, "GET", url, params=params)).items

    async def letter(self, key: str, letter_id: str) -> LetterDetail:
        url = f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}"
        return await self._get(LetterDetail, key, "GET", url)

    async def redrive(self, key: str, letter_id: str, reason: str) -> Done:
        url = f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}/redrive"
        return await self._get(Done, key, "POST", url, json=request_body(RedriveBody, reason=reason))

    async def discard(self, key: str, letter_id: str, reason: str) -> Done:
        url = f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}/discard"
        return await self._get(Done, key, "POST", url, json=request_body(DiscardBody, reason=reason))

    # -- outcome analytics and the notifier ---------------------------------------------------------

    async def outcomes(self, key: str) -> list[OutcomeBucket]:
        return (await self._get(Outcomes, key, "GET", f"{self.analytics}/analytics/outcomes")).buckets

    async def releases(self, key: str) -> list[ReleaseOutcomes]:
        return (await self._get(Releases, key, "GET", f"{self.analytics}/analytics/releases")).releases

    async def notifications(self, key: str, approval_id: str) -> list[Notification]:
        url = f"{self.notifier}/v1/notifications"
        found = await self._get(Notifications, key, "GET", url, params={"approval_id": approval_id})
        return found.notifications
