"""The console in a real headless Chromium (Debian's, driven through its chromedriver by
Selenium), against every service as its own process on real Kafka and PostgreSQL.

A submitter starts a procurement over the API; the notifier's e-mail reaches the SMTP
server; the manager follows its link, signs in, reads the review context and approves;
the workflow page shows it completed with the decision and the manager's name. Then an
operator redrives a dead letter. Every page is photographed into
``.local/test-output/console`` (the README's screenshots come from there).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from chorus.contracts.registry import Registry
from chorus.tools.devstack import SERVICES, DevStack
from chorus.web.apikeys import DEMO_KEYS
from tests.support.kafka import publish
from tests.support.stacks import own_stack
from tests.support.submissions import procurement

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SHOTS = Path(os.environ.get("CHORUS_LOCAL", ROOT / ".local")) / "test-output" / "console"
SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
OPERATOR = {"Authorization": "Bearer demo-operator-key"}


@dataclass
class Deployment:
    stack: DevStack
    registry: Registry
    kafka: str

    @property
    def console_url(self) -> str:
        return self.stack.console_url

    def url_of(self, service: str) -> str:
        health = self.stack.procs[service].health_url
        assert health is not None
        return health.removesuffix("/health")


@pytest.fixture(scope="module")
async def deployment(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[Deployment]:
    async with own_stack(
        tmp_path_factory.mktemp("console"),
        kafka_bootstrap,
        database_url,
        name="console",
        services=(*SERVICES, "outcome_analytics", "console"),
        service_env={
            "gateway": {"CHORUS_API_KEYS": json.dumps({k: v.model_dump() for k, v in DEMO_KEYS.items()})}
        },
    ) as own:
        yield Deployment(own.stack, own.registry, kafka_bootstrap)


@pytest.fixture(scope="module")
def chromium() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, (
        "no chromium/chromedriver: `make test` installs them (deploy/local/browser.sh)"
    )
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    session.set_page_load_timeout(30)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield session
    finally:
        session.quit()


@pytest.fixture
def browser(chromium: WebDriver) -> WebDriver:
    """The module's browser, signed out: a test that failed half-way leaves no session
    (cookies are per host, so those of the page it left are every console's)."""
    chromium.delete_all_cookies()
    return chromium


def shot(browser: WebDriver, name: str) -> None:
    """The page as it is now, full height, into the output folder."""
    height = browser.execute_script("return document.body.scrollHeight")
    width = browser.get_window_size()["width"]
    browser.set_window_size(width, max(800, min(int(height) + 120, 4000)))
    browser.save_screenshot(str(SHOTS / f"{name}.png"))
    browser.set_window_size(width, 1000)


def until(
    check: Callable[[], Any], what: str, timeout_s: float = 60.0, reload: WebDriver | None = None
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except WebDriverException:
            last = None
        if last:
            return last
        time.sleep(0.5)
        if reload is not None:
            reload.refresh()
    raise AssertionError(f"no {what} within {timeout_s}s")


def text(browser: WebDriver) -> str:
    return str(browser.find_element(By.TAG_NAME, "main").text)


def sign_in(browser: WebDriver, key: str) -> None:
    assert "/signin" in browser.current_url, browser.current_url
    browser.find_element(By.ID, "api_key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "form[action='/signin'] button").click()


def sign_out(browser: WebDriver) -> None:
    browser.find_element(By.CSS_SELECTOR, "form.signout button").click()
    until(lambda: "/signin" in browser.current_url, "the sign-in page")


async def test_a_reviewer_follows_the_mailed_link_signs_in_reads_the_context_and_approves(
    deployment: Deployment, browser: WebDriver
) -> None:
    stack = deployment.stack
    run = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        accepted = await api.post(
            "/v1/workflows/procurement",
            json=procurement(run),
            headers={**SUBMITTER, "Idempotency-Key": f"order-{run}"},
        )
    assert accepted.status_code == 202, accepted.text
    workflow_id = accepted.json()["workflow_id"]

    async def mailed() -> dict[str, Any] | None:
        stats = await stack.sandbox_stats()
        mail: list[dict[str, Any]] = stats["mail"]  # type: ignore[assignment]
        mine = [m for m in mail if workflow_id in m["subject"] and "dana.manager@example.test" in m["to"]]
        return mine[0] if mine else None

    mail = await _eventually(mailed, "the manager's e-mail")
    assert "Approval needed" in mail["subject"]
    link = re.search(r"(http://127\.0\.0\.1:\d+/approvals/\S+)", mail["text"])
    assert link, mail["text"]

    # The link leads to sign-in first, then back to the approval it names.
    browser.get(link.group(1))
    until(lambda: "/signin" in browser.current_url, "the sign-in page")
    shot(browser, "signin")
    sign_in(browser, "demo-manager-key")
    until(lambda: "/approvals/" in browser.current_url and "Review" in text(browser), "the approval page")
    page = text(browser)
    assert f"Invoice INV-{run}" in page  # the review context: summary ...
    assert "Why you are asked" in page and "Inputs" in page and "vendor-acme" in page  # ... why, inputs
    assert "waiting on manager" in page and "workflow.started" in page  # its state and timeline
    shot(browser, "approval")
    browser.set_window_size(390, 844)  # a phone
    shot(browser, "approval-phone")
    browser.set_window_size(1280, 1000)

    # An altered link is refused, whoever is signed in.
    browser.get(link.group(1).replace("sig=", "sig=0"))
    assert "Not a valid link" in text(browser)
    browser.get(link.group(1))

    browser.find_element(By.ID, "comment").send_keys("Matches PO-7781; approved.")
    browser.find_element(By.CSS_SELECTOR, "button[name='decision'][value='approve']").click()
    # The timeline may show the decision a moment before the state line names who decided.
    until(lambda: "approve by dana.manager" in text(browser), "the decision and who made it", reload=browser)
    assert not browser.find_elements(By.CSS_SELECTOR, "button[name='decision']")  # final

    browser.get(f"{stack.console_url}/workflows/{workflow_id}")
    until(
        lambda: "completed" in browser.find_element(By.CSS_SELECTOR, ".status").text,
        "completed",
        reload=browser,
    )
    page = text(browser)
    assert "approval.decided" in page and "dana.manager" in page and "approve by tier manager" in page
    assert "payment" in page  # the step after the decision
    shot(browser, "workflow")

    # Its submitter hears how it ended: one e-mail, with the outcome and the workflow's page.
    async def told() -> list[dict[str, Any]] | None:
        stats = await stack.sandbox_stats()
        mail: list[dict[str, Any]] = stats["mail"]  # type: ignore[assignment]
        mine = [m for m in mail if workflow_id in m["subject"] and "demo-submitter@example.test" in m["to"]]
        return mine or None

    [ended] = await _eventually(told, "the submitter's e-mail")
    assert "Ended (completed)" in ended["subject"] and "ended: completed." in ended["text"]
    assert re.search(rf"http://127\.0\.0\.1:\d+/workflows/{workflow_id}\b", ended["text"]), ended["text"]

    browser.get(f"{stack.console_url}/approvals")
    shot(browser, "approvals")
    sign_out(browser)
    browser.get(f"{stack.console_url}/workflows/{workflow_id}")
    assert "/signin" in browser.current_url  # signed out means signed out

    sign_in(browser, "demo-operator-key")
    until(lambda: "/workflows/" in browser.current_url, "the workflow after sign-in")
    browser.get(f"{stack.console_url}/workflows?q=order-{run}")
    until(lambda: workflow_id in text(browser), "the workflow found by its business key")
    shot(browser, "workflows")
    # Its timeline says the submitter was told, once their mailbox took the message.
    browser.get(f"{stack.console_url}/workflows/{workflow_id}")
    until(lambda: "submitter.notified" in text(browser), "the submitter told, on its page", reload=browser)
    assert "email to the submitter (ended)" in text(browser)

    # Found by its business attributes, typed into the search box; a query that cannot run
    # says why where it was typed.
    browser.get(f"{stack.console_url}/workflows")
    assert "vendor" in browser.find_element(By.ID, "query-hint").text  # what it may search by
    box = browser.find_element(By.ID, "query")
    box.send_keys("vendor = 'vendor-acme' AND amount = 124000 AND status = 'completed'")
    box.submit()
    until(lambda: workflow_id in text(browser), "the workflow found by vendor, amount and status")
    assert "vendor: vendor-acme" in text(browser) and "amount: 124000" in text(browser)
    shot(browser, "workflows-search")
    box = browser.find_element(By.ID, "query")
    box.clear()
    box.send_keys("amount > 'a lot'")
    box.submit()
    until(lambda: "amount is a number" in text(browser), "the query refused, saying why")
    assert browser.find_element(By.CSS_SELECTOR, "#results .alert").text.startswith("Invalid query")
    shot(browser, "workflows-search-refused")
    browser.get(f"{stack.console_url}/outcomes")
    until(lambda: "procurement" in text(browser), "outcomes of procurement", reload=browser)
    shot(browser, "outcomes")
    sign_out(browser)


async def test_an_operator_redrives_a_dead_letter_from_the_console_and_the_audit_names_them(
    deployment: Deployment, browser: WebDriver
) -> None:
    registry, stack = deployment.registry, deployment.stack
    marker = f"console-{uuid.uuid4().hex[:8]}"
    # A record no service can read: the invoice agent dead-letters it, its bytes kept.
    topic = registry.physical_topic("invoice.received")
    await publish(deployment.kafka, topic, [marker.encode()], key=marker.encode())

    async def letter() -> dict[str, Any] | None:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(
                f"{deployment.url_of('deadletter_service')}/v1/dead-letters",
                params={"status": "open", "limit": 200},
                headers=OPERATOR,
            )
        mine = [x for x in answer.json()["items"] if x["original"]["topic"] == topic]
        return mine[0] if mine else None

    found = await _eventually(letter, "the dead letter stored")
    browser.get(f"{stack.console_url}/dead-letters")
    sign_in(browser, "demo-operator-key")
    until(lambda: "Dead letters" in text(browser), "the dead-letter list")
    shot(browser, "dead-letters")
    browser.get(f"{stack.console_url}/dead-letters/{found['id']}")
    page = text(browser)
    assert marker in page and "Every failure" in page and "No one has acted on it yet" in page
    shot(browser, "dead-letter")
    browser.find_element(By.LINK_TEXT, "Redrive…").click()
    until(lambda: "Redrive dead letter" in text(browser), "the confirmation")
    shot(browser, "redrive-confirm")
    browser.find_element(By.ID, "reason").send_keys("handler fixed")
    browser.find_element(By.CSS_SELECTOR, "form button.danger").click()
    until(lambda: "redriven" in browser.find_element(By.CSS_SELECTOR, ".letter-status").text, "redriven")
    audit = browser.find_element(By.CSS_SELECTOR, "table.operations").text
    assert "redrive" in audit and "sam.operator" in audit and "handler fixed" in audit
    assert not browser.find_elements(By.LINK_TEXT, "Redrive…")  # done: nothing to do twice
    shot(browser, "dead-letter-redriven")
    sign_out(browser)


async def test_a_submitter_adds_the_missing_line_from_the_console_and_sees_the_agents_answer(
    deployment: Deployment, browser: WebDriver
) -> None:
    stack = deployment.stack
    # 30 of the invoice's 40 GPU hours in its document: the agent waits for the missing line.
    body = procurement(uuid.uuid4().hex[:8], line="30 x GPU hours @ 31.00 EUR")
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        workflow_id = (await api.post("/v1/workflows/procurement", json=body, headers=SUBMITTER)).json()[
            "workflow_id"
        ]

        async def waiting() -> bool:
            status = (await api.get(f"/v1/workflows/{workflow_id}", headers=SUBMITTER)).json()
            return bool(status.get("waiting_for") == "signal add_line")

        await _eventually(waiting, "the wait for a line")
    browser.get(f"{stack.console_url}/workflows/{workflow_id}")
    sign_in(browser, "demo-submitter-key")
    until(lambda: "Send it a signal" in text(browser), "the signal form")
    assert "Waiting for signal add_line" in text(browser)
    shot(browser, "signal-form")

    def send(quantity: int, reason: str) -> str:
        line = {"line": {"description": "GPU hours", "quantity": quantity, "unit_price_cents": 3100}}
        field = browser.find_element(By.ID, "input-add_line")
        field.clear()
        field.send_keys(json.dumps(line))
        browser.find_element(By.ID, "reason-add_line").send_keys(reason)
        browser.find_element(By.CSS_SELECTOR, "form.signal button[name='wait']").click()
        answer = until(lambda: browser.find_elements(By.CSS_SELECTOR, "p.answer"), "the answer")
        return str(answer[0].text)

    refused = send(5, "one line was cut off")
    assert refused.startswith("refused") and "not taken" in refused
    shot(browser, "signal-refused")
    accepted = send(10, "this is the line")
    assert accepted == "accepted the lines add up now: invoice validated"
    page = text(browser)
    assert "signal from demo-submitter: this is the line" in page and "invoice.validated" in page
    shot(browser, "signal-accepted")
    sign_out(browser)


async def test_a_submitter_sees_a_schedule_and_its_runs_and_pauses_it_from_the_console(
    deployment: Deployment, browser: WebDriver
) -> None:
    stack = deployment.stack
    body = {
        "workflow_type": "procurement",
        "input": procurement(uuid.uuid4().hex[:8])["input"],
        "cron": "0 9 * * 1-5",
        "note": "weekday invoice run",
    }
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        created = await api.post("/v1/schedules", json=body, headers=SUBMITTER)
        assert created.status_code == 201, created.text
        schedule_id = created.json()["schedule_id"]
        triggered = await api.post(f"/v1/schedules/{schedule_id}/trigger", headers=SUBMITTER)
        assert triggered.status_code == 200, triggered.text

        async def started() -> bool:
            runs = (await api.get(f"/v1/schedules/{schedule_id}", headers=SUBMITTER)).json()["runs"]
            return bool(runs) and runs[0]["status"] == "started"

        await _eventually(started, "the triggered run started")
    browser.get(f"{stack.console_url}/schedules")
    sign_in(browser, "demo-submitter-key")
    until(lambda: "weekday invoice run" in text(browser), "the schedule listed")
    assert "cron 0 9 * * 1-5" in text(browser)
    shot(browser, "schedules")
    browser.find_element(By.LINK_TEXT, schedule_id[:12]).click()
    until(lambda: "Runs" in text(browser), "the schedule's page")
    runs = browser.find_element(By.CSS_SELECTOR, "table.runs").text
    assert "manual" in runs and "started" in runs and "wf-" in runs
    browser.find_element(By.CSS_SELECTOR, "button[value='pause']").click()
    until(lambda: "paused" in browser.find_element(By.CSS_SELECTOR, ".status-card .tag").text, "paused")
    assert "pause by demo-submitter" in text(browser) and "create by demo-submitter" in text(browser)
    shot(browser, "schedule-paused")
    browser.find_element(By.CSS_SELECTOR, "button[value='delete']").click()
    until(lambda: "deleted" in browser.find_element(By.CSS_SELECTOR, ".status-card .tag").text, "deleted")
    sign_out(browser)


async def test_an_operator_counts_then_cancels_the_workflows_a_search_finds_from_the_console(
    deployment: Deployment, browser: WebDriver
) -> None:
    stack = deployment.stack
    ids, query = await _two_waiting(stack)
    _bulk_form(browser, stack, query)
    browser.find_element(By.ID, "reason").send_keys("supplier withdrew")
    browser.find_element(By.CSS_SELECTOR, "button[name='dry_run']").click()
    dry = until(lambda: browser.find_elements(By.CSS_SELECTOR, ".dry-run"), "the dry run's count")
    assert "would cancel 2 running workflow(s); nothing was done" in dry[0].text
    assert all(workflow_id in dry[0].text for workflow_id in ids)
    shot(browser, "bulk-dry-run")
    browser.find_element(By.CSS_SELECTOR, "form.bulk button.danger").click()
    until(
        lambda: (
            "2 done, 0 skipped, 0 pending" in browser.find_element(By.CSS_SELECTOR, ".bulk-progress").text
        ),
        "both cancelled",
        reload=browser,
    )
    items = browser.find_element(By.CSS_SELECTOR, "table.items").text
    assert all(workflow_id in items for workflow_id in ids) and "sam.operator" in text(browser)
    shot(browser, "bulk-action-done")
    sign_out(browser)


async def test_an_operator_resets_the_workflows_a_search_finds_to_an_event_type_from_the_console(
    deployment: Deployment, browser: WebDriver
) -> None:
    """Two procurements waiting for their manager: the operator counts them, then resets both
    to their invoice.validated; each is taken back and waits for its manager again."""
    stack = deployment.stack
    ids, query = await _two_waiting(stack)
    _bulk_form(browser, stack, query)
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        Select(browser.find_element(By.ID, "action")).select_by_value("reset")
        browser.find_element(By.ID, "reset_to").send_keys("invoice.validated")
        browser.find_element(By.ID, "reason").send_keys("the ledger was corrected")
        browser.find_element(By.CSS_SELECTOR, "button[name='dry_run']").click()
        dry = until(lambda: browser.find_elements(By.CSS_SELECTOR, ".dry-run"), "the dry run's count")
        assert "would reset to invoice.validated 2 running workflow(s); nothing was done" in dry[0].text
        shot(browser, "bulk-reset-dry-run")
        browser.find_element(By.CSS_SELECTOR, "form.bulk button.danger").click()
        until(
            lambda: (
                "2 done, 0 skipped, 0 pending" in browser.find_element(By.CSS_SELECTOR, ".bulk-progress").text
            ),
            "both reset",
            reload=browser,
        )
        # Read as one (a read of a page being replaced is tried again).
        heading, items = until(
            lambda: (
                browser.find_element(By.TAG_NAME, "h1").text,
                browser.find_element(By.CSS_SELECTOR, "table.items").text,
            ),
            "the action's page",
        )
        assert "reset to invoice.validated" in heading
        assert items.count("rst-") == 2
        shot(browser, "bulk-reset-done")

        async def taken_back() -> bool:
            for workflow_id in ids:
                timeline = (await api.get(f"/v1/workflows/{workflow_id}", headers=OPERATOR)).json()[
                    "timeline"
                ]
                if not any(e["event_type"] == "workflow.reset_applied" for e in timeline):
                    return False
            return True

        await _eventually(taken_back, "both reset")
    sign_out(browser)


async def _two_waiting(stack: DevStack) -> tuple[list[str], str]:
    """Two procurements of this run's own amount, once both wait for their manager: (their
    ids, the search that finds them)."""
    run = uuid.uuid4().hex[:8]
    # This run's own amount, and a small one: the module's workflows share one purchase order
    # (1,500 EUR), and these may stay reserved (a reset takes them back to waiting).
    total = f"{1 + int(run[:4], 16) % 900 / 100:.2f}"
    bodies = [procurement(f"{run}{i}", total=total, line=f"1 x GPU hours @ {total} EUR") for i in range(2)]
    query = f"amount = {round(float(total) * 100)} AND status = 'waiting'"
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        ids = [
            (await api.post("/v1/workflows/procurement", json=body, headers=SUBMITTER)).json()["workflow_id"]
            for body in bodies
        ]

        async def waiting() -> bool:
            found = await api.get("/v1/workflows", params={"query": query}, headers=OPERATOR)
            return len(found.json()["workflows"]) == 2

        await _eventually(waiting, "both waiting for their manager")
    return ids, query


def _bulk_form(browser: WebDriver, stack: DevStack, query: str) -> None:
    """The bulk action form, as the operator, with ``query`` in it."""
    browser.get(f"{stack.console_url}/bulk-actions")
    sign_in(browser, "demo-operator-key")
    until(lambda: "Act on every running workflow" in text(browser), "the bulk action form")
    browser.find_element(By.ID, "query").send_keys(query)


async def _eventually(probe: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout_s}s")


async def test_an_operator_resets_a_waiting_procurement_to_its_invoice_with_the_input_corrected(
    deployment: Deployment, browser: WebDriver
) -> None:
    """Edit-and-reset from the console: the invoice said 2 hours, the vendor billed 1. The
    operator follows "Reset to here" on invoice.received, corrects the input the form shows,
    gives a reason; the workflow page shows the first run struck out (undone by the reset)
    and the corrected invoice reserved for anew."""
    stack = deployment.stack
    run = uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        # Two hours only: the module's other workflows have invoiced most of the purchase order.
        body = procurement(run, total="62.00", line="2 x GPU hours @ 31.00 EUR")
        submitted = await api.post("/v1/workflows/procurement", json=body, headers=SUBMITTER)
        workflow_id = submitted.json()["workflow_id"]

        async def waiting() -> dict[str, Any] | None:
            status = (await api.get(f"/v1/workflows/{workflow_id}", headers=OPERATOR)).json()
            return status if (status.get("pending_approval") or {}).get("tier") == "manager" else None

        status = await _eventually(waiting, "the wait for a manager")
        received = next(e for e in status["timeline"] if e["event_type"] == "invoice.received")
    browser.get(f"{stack.console_url}/workflows/{workflow_id}")
    sign_in(browser, "demo-operator-key")
    link = until(
        lambda: browser.find_elements(By.CSS_SELECTOR, f"a.reset[href$='event={received['event_id']}']"),
        "the reset link of invoice.received",
    )
    link[0].click()
    until(lambda: "to invoice.received?" in text(browser), "the reset page")
    assert "budget.reserved" in text(browser)  # what it undoes is said before it is done
    corrected = procurement(run, total="31.00", line="1 x GPU hours @ 31.00 EUR")["input"]
    field = browser.find_element(By.ID, "input")
    field.clear()
    field.send_keys(json.dumps(corrected))
    browser.find_element(By.ID, "reason").send_keys("the vendor billed one hour")
    shot(browser, "reset-form")
    browser.find_element(By.CSS_SELECTOR, "form.reset button[type='submit']").click()
    until(lambda: "undone by reset" in text(browser), "the first run struck out", reload=browser)

    async def reserved_anew() -> bool:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
            timeline = (await api.get(f"/v1/workflows/{workflow_id}", headers=OPERATOR)).json()["timeline"]
        live = [e for e in timeline if e["event_type"] == "budget.reserved" and e["undone_by"] is None]
        return bool(live) and live[0]["payload"]["amount_cents"] == 3_100

    await _eventually(reserved_anew, "the corrected invoice reserved for")
    browser.refresh()
    until(lambda: "workflow.reset_applied" in text(browser), "each service's answer in the timeline")
    shot(browser, "reset-done")
    sign_out(browser)
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as api:
        cancel = {"reason": "test over"}
        assert (
            await api.post(f"/v1/workflows/{workflow_id}/cancel", json=cancel, headers=OPERATOR)
        ).status_code == 202
