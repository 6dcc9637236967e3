"""What ``chorus rollout status`` says of each release: its role, and its rates.
(Policy changes, moves and the rollback rule: tests/features/releases/test_pinning.py.)"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from chorus.contracts.api.rollout_service import SetBody, StartBody
from chorus.contracts.rollouts import RolloutChanged
from chorus.platform.rollout_service.domain import ReleaseStatus, role_of

CANARY = RolloutChanged(
    service="invoice_agent",
    revision=1,
    stable="1.0",
    canary="2.0",
    percent=20,
    status="canary",
    action="start",
    changed_by="ops",
)
ROLLED_BACK = CANARY.model_copy(
    update={"revision": 2, "status": "rolled_back", "action": "rollback", "percent": 0}
)


def test_a_release_is_stable_or_canary_as_the_policy_says_else_draining_until_its_work_ends() -> None:
    assert role_of("1.0", CANARY, in_flight=0) == "stable"
    assert role_of("2.0", CANARY, in_flight=0) == "canary"
    # A rolled-back canary finishes what is pinned to it, then may be removed.
    assert role_of("2.0", ROLLED_BACK, in_flight=3) == "draining"
    assert role_of("2.0", ROLLED_BACK, in_flight=0) == "idle"
    assert role_of("0.9", None, in_flight=1) == "draining"  # no rollout: only what it still runs


def test_rates_are_over_the_workflows_that_count_and_absent_when_there_are_none() -> None:
    status = ReleaseStatus(
        "2.0", workflows=8, ended=3, completed=2, failed=1, failures={"semantic": 1, "persistent": 2}
    )
    shown = status.as_json()
    assert shown["completion_rate"] == 0.6667  # of the ended ones: the rest may still complete
    assert shown["failure_rate"] == 0.125  # of every pinned one
    assert json.dumps(shown["failures_by_category"]) == '{"persistent": 2, "semantic": 1}'  # sorted
    fresh = ReleaseStatus("2.0").as_json()
    assert (fresh["completion_rate"], fresh["failure_rate"]) == (None, None)


@pytest.mark.parametrize("percent", [True, "5"], ids=["true", "a-string"])
def test_a_share_that_is_no_json_number_is_refused_naming_percent(percent: object) -> None:
    # Before, pydantic's lax mode took true for 1 % and "5" for 5 %: a rollout started on a typo.
    for body, rest in ((StartBody, {"canary": "2.0"}), (SetBody, {})):
        with pytest.raises(ValidationError) as refused:
            body.model_validate({**rest, "percent": percent})
        assert [error["loc"] for error in refused.value.errors()] == [("percent",)]
    assert StartBody.model_validate({"canary": "2.0", "percent": 5}).percent == 5.0
