"""Secure by default: the published demo secrets work only in demo mode (CHORUS_ENV=demo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from chorus.base.errors import ConfigError
from chorus.base.settings import EX_CONFIG, demo_key_service_credential
from chorus.contracts.registry import default_registry
from chorus.platform.audit_projector.config import Settings as AuditSettings
from chorus.platform.deadletter_service.config import Settings as DeadLetterSettings
from chorus.platform.gateway.config import Settings as GatewaySettings
from chorus.platform.outcome_analytics.config import Settings as AnalyticsSettings
from chorus.privacy.feature import key_service_credential
from chorus.reference.payment_agent.config import Settings as PaymentSettings
from chorus.runtime.runner import ServiceSettings
from chorus.tools.declarations import service_module
from chorus.web.tls import make_local_tls
from tests.support.processes import run_captured

ROOT = Path(__file__).resolve().parents[2]
REAL = {
    "CHORUS_DATABASE_URL": "postgresql://gateway:s3cret-from-vault@db.internal:5432/chorus",
    "CHORUS_API_KEYS": json.dumps({"k-7f3a9c": {"principal": "alice", "role": "submitter"}}),
    "CHORUS_WEBHOOK_SECRET": "whsec-from-vault",
    "CHORUS_AUDIT_API_KEY": "gw-7d1e0b",
    "CHORUS_PAYMENT_API_KEY": "pk-live-from-vault",
    "CHORUS_KEY_SERVICE_API_KEY": "ks-9b2c41",
    "CHORUS_SUBJECT_KEY": "subject-key-from-vault",
}


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("CHORUS_ENV", raising=False)
    for name in (*REAL, "CHORUS_DATABASE_POOL_MODE", "CHORUS_DATABASE_DIRECT_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_outside_demo_mode_the_gateway_refuses_every_demo_secret_by_name(
    production: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValidationError) as refused:
        GatewaySettings()
    message = str(refused.value)
    for name in (
        "CHORUS_DATABASE_URL",
        "CHORUS_API_KEYS",
        "CHORUS_WEBHOOK_SECRET",
        "CHORUS_AUDIT_API_KEY",
        "CHORUS_ENV=demo",
    ):
        assert name in message


@pytest.mark.parametrize("settings", [DeadLetterSettings, AuditSettings, AnalyticsSettings])
def test_every_api_refuses_the_demo_keys_outside_demo_mode(
    production: pytest.MonkeyPatch, settings: type[GatewaySettings]
) -> None:
    production.setenv("CHORUS_DATABASE_URL", REAL["CHORUS_DATABASE_URL"])
    with pytest.raises(ValidationError, match="CHORUS_API_KEYS"):
        settings()
    production.setenv("CHORUS_API_KEYS", REAL["CHORUS_API_KEYS"])
    if issubclass(settings, ServiceSettings):  # on the runtime: it keys subject references
        with pytest.raises(ValidationError, match=r"CHORUS_SUBJECT_KEY"):
            settings()
    for name in ("CHORUS_KEY_SERVICE_API_KEY", "CHORUS_SUBJECT_KEY"):
        production.setenv(name, REAL[name])
    assert settings().api_keys["k-7f3a9c"].principal == "alice"


def test_behind_pgbouncer_in_transaction_mode_the_relays_direct_url_is_required_and_no_demo_one(
    production: pytest.MonkeyPatch,
) -> None:
    for name, value in REAL.items():
        production.setenv(name, value)
    production.setenv("CHORUS_DATABASE_POOL_MODE", "transaction")
    with pytest.raises(
        ValidationError, match="CHORUS_DATABASE_POOL_MODE=transaction needs CHORUS_DATABASE_DIRECT_URL"
    ):
        GatewaySettings()
    production.setenv("CHORUS_DATABASE_DIRECT_URL", "postgresql://gateway:chorus@db.internal:5432/chorus")
    with pytest.raises(ValidationError, match=r"CHORUS_DATABASE_DIRECT_URL \(its password is the demo's\)"):
        GatewaySettings()
    production.setenv("CHORUS_DATABASE_DIRECT_URL", REAL["CHORUS_DATABASE_URL"])
    assert GatewaySettings().database_pool_mode == "transaction"


def test_real_secrets_start_and_demo_mode_accepts_the_demo_ones(production: pytest.MonkeyPatch) -> None:
    for name, value in REAL.items():
        production.setenv(name, value)
    assert GatewaySettings().env == "production"
    assert PaymentSettings().payment_api_key == "pk-live-from-vault"
    production.setenv("CHORUS_PAYMENT_API_KEY", "sandbox-key")
    with pytest.raises(ValidationError, match="CHORUS_PAYMENT_API_KEY"):
        PaymentSettings()
    production.setenv("CHORUS_ENV", "demo")
    assert PaymentSettings().payment_api_key == "sandbox-key"


def run_service(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_captured([sys.executable, "-m", service_module(name)], env=env, cwd=ROOT, timeout_s=60)


def test_a_service_with_demo_secrets_or_no_kafka_login_exits_78_saying_why() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    demo_db = run_service("budget_agent", {**base, "CHORUS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"})
    assert demo_db.returncode == EX_CONFIG
    assert "refusing to start: demo secrets outside demo mode: CHORUS_DATABASE_URL" in demo_db.stderr
    assert "Traceback" not in demo_db.stderr

    no_login = run_service("budget_agent", {**base, "CHORUS_ENV": "demo"})
    assert no_login.returncode == EX_CONFIG
    assert "CHORUS_KAFKA_SASL_USERNAME" in no_login.stderr


def test_a_service_without_its_signing_keys_exits_78_naming_the_setting(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    env = {**base, "CHORUS_ENV": "demo", "CHORUS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}
    unset = run_service("budget_agent", env)
    assert unset.returncode == EX_CONFIG
    assert "refusing to start" in unset.stderr and "CHORUS_SIGNING_DIR" in unset.stderr
    # The gate signs approvals: the public keys alone are not enough for it.
    empty = run_service("approval_gate", {**env, "CHORUS_SIGNING_DIR": str(tmp_path)})
    assert empty.returncode == EX_CONFIG
    assert "approval_gate.key" in empty.stderr
    assert "Traceback" not in unset.stderr + empty.stderr


def test_each_service_presents_its_own_key_service_credential_and_a_keyless_one_none(
    production: pytest.MonkeyPatch,
) -> None:
    registry = default_registry()
    for name, value in REAL.items():
        production.setenv(name, value)
    assert key_service_credential(ServiceSettings(), registry, "budget_agent") == "ks-9b2c41"
    # The source fetcher reads web pages and writes sources: no personal field, no key.
    assert key_service_credential(ServiceSettings(), registry, "source_fetcher") is None
    production.delenv("CHORUS_KEY_SERVICE_API_KEY")
    with pytest.raises(ConfigError, match=r"budget_agent.*CHORUS_KEY_SERVICE_API_KEY"):
        key_service_credential(ServiceSettings(), registry, "budget_agent")
    # Another service's demo credential is refused outside the demo like every demo secret.
    production.setenv("CHORUS_KEY_SERVICE_API_KEY", demo_key_service_credential("budget_agent"))
    with pytest.raises(ValidationError, match="CHORUS_KEY_SERVICE_API_KEY"):
        ServiceSettings()
    production.setenv("CHORUS_ENV", "demo")
    production.delenv("CHORUS_KEY_SERVICE_API_KEY")
    demo = key_service_credential(ServiceSettings(), registry, "payment_agent")
    assert demo == demo_key_service_credential("payment_agent") != demo_key_service_credential("budget_agent")


def test_the_key_service_does_not_start_without_its_certificate_nor_a_caller_with_plain_http(
    tmp_path: Path,
) -> None:
    """Data keys travel over TLS only, in the demo too: the key service without a certificate,
    or a service told to fetch keys over plain http or to trust an authority it cannot read,
    exits 78 naming the setting."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    env = {**base, "CHORUS_ENV": "demo", "CHORUS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}
    keyless = run_service("key_service", env)
    assert keyless.returncode == EX_CONFIG
    assert "CHORUS_KEY_SERVICE_TLS_CERT_FILE and CHORUS_KEY_SERVICE_TLS_KEY_FILE" in keyless.stderr
    made = make_local_tls(tmp_path, "key_service")
    swapped = {
        "CHORUS_KEY_SERVICE_TLS_CERT_FILE": str(made.key_file),
        "CHORUS_KEY_SERVICE_TLS_KEY_FILE": str(made.cert_file),
    }
    wrong = run_service("key_service", {**env, **swapped})
    assert wrong.returncode == EX_CONFIG and "not a certificate and its key" in wrong.stderr
    unreadable = run_service(
        "budget_agent", {**env, "CHORUS_KEY_SERVICE_CA_FILE": str(tmp_path / "none.pem")}
    )
    assert unreadable.returncode == EX_CONFIG
    assert "CHORUS_KEY_SERVICE_CA_FILE: cannot read the certificate authority" in unreadable.stderr
    plain = run_service("budget_agent", {**env, "CHORUS_KEY_STORES": '{"local": "http://127.0.0.1:8117"}'})
    assert plain.returncode == EX_CONFIG
    assert "CHORUS_KEY_STORES: the key service of local is not an https:// URL" in plain.stderr
    assert "Traceback" not in keyless.stderr + wrong.stderr + unreadable.stderr + plain.stderr


def test_static_membership_without_an_instance_name_is_refused_naming_both_settings() -> None:
    with pytest.raises(ValidationError, match="CHORUS_STATIC_MEMBERSHIP needs CHORUS_INSTANCE"):
        ServiceSettings(static_membership=True)
    assert ServiceSettings(static_membership=True, instance="invoice-agent-0").static_membership
