"""docker-compose.yml stays a valid Compose file for users who run Chorus in Docker."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from cryptography import x509
from typer.testing import CliRunner

from chorus.contracts.registry import Registry, load_registry
from chorus.tools import composesecrets
from chorus.tools.chart import settings_class
from chorus.tools.cli.main import app
from chorus.tools.declarations import service_module
from chorus.tools.devstack import DOCUMENTED_PORTS, SERVICES

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_is_valid() -> None:
    if shutil.which("docker") is None:
        pytest.fail("the docker client is needed to validate docker-compose.yml (no engine needed)")
    # The compose plugin, built once when the client lacks it (make setup and make demo never build it).
    plugin = subprocess.run(
        [str(ROOT / "deploy" / "local" / "compose-plugin.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert plugin.returncode == 0, plugin.stderr
    # Plain `docker compose`, as a user or CI would run it: no private DOCKER_CONFIG.
    proc = subprocess.run(
        ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_compose_service_waits_for_healthy_infrastructure() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    infra = {"kafka", "postgres"}
    # What the infrastructure itself starts after (the secrets it is configured with).
    before_infra = {dep for name in infra for dep in compose["services"][name].get("depends_on", {})}
    for name, service in compose["services"].items():
        if name in infra:
            assert "healthcheck" in service, f"{name} has no healthcheck"
            continue
        if name in before_infra:
            continue
        if service.get("profiles") == ["observability"]:
            continue  # Prometheus and Grafana watch; they need neither
        depends = service.get("depends_on", {})
        for dependency in infra:
            assert depends.get(dependency, {}).get("condition") == "service_healthy", (
                f"service {name} does not wait for {dependency} to be healthy"
            )


COMPOSE_NAME = {"outcome_analytics": "analytics"}
"""Compose's name of a dev-stack process where they differ."""


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_every_service_runs_in_compose_on_the_port_the_readme_documents() -> None:
    """Health-checked on its documented port and published there (on 127.0.0.1 only), as
    `make services` runs it: the README's port table holds for both."""
    services = _compose()["services"]
    for name in (*SERVICES, "outcome_analytics", "console"):
        service = services[COMPOSE_NAME.get(name, name)]
        port = DOCUMENTED_PORTS[name]
        assert service["command"][-1] == service_module(name), name
        assert f"127.0.0.1:{port}/health" in service["healthcheck"]["test"][-1], name
        published = [str(p) for p in service.get("ports", [])]
        assert f"127.0.0.1:{port}:{port}" in published, (name, published)
        if name == "key_service":  # data keys: its API is reached inside the compose network only
            assert published == [f"127.0.0.1:{port}:{port}"], published
        assert all(p.startswith("127.0.0.1:") for p in published), (name, published)


def test_the_observability_profile_scrapes_every_service_and_provisions_the_dashboards() -> None:
    services = _compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"]
    proc = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            str(ROOT / "docker-compose.yml"),
            "--profile",
            "observability",
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    config = ROOT / "deploy" / "observability" / "prometheus" / "prometheus.compose.yml"
    checked = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [job] = yaml.safe_load(config.read_text())["scrape_configs"]
    scraped = {
        target: group["labels"]["service"] for group in job["static_configs"] for target in group["targets"]
    }
    assert scraped == {
        f"{COMPOSE_NAME.get(name, name)}:{DOCUMENTED_PORTS[name]}": name
        for name in (*SERVICES, "outcome_analytics", "console")
    }
    mounts = services["grafana"]["volumes"]
    provider = yaml.safe_load(
        (
            ROOT / "deploy" / "observability" / "grafana" / "provisioning" / "dashboards" / "chorus.yml"
        ).read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert f"./deploy/observability/grafana/dashboards:{path}:ro" in mounts


# -- secured like `make up` (issue 36) -----------------------------------------------------
# The compose file is read twice: resolved by `docker compose config` (anchors merged, paths
# absolute) for mounts and the broker, and as written for env_file lists and the literal
# environment (`config` inlines the env files a user has filled in, which are not the
# compose file's doing).

COMPOSE = ("docker", "compose", "-f", str(ROOT / "docker-compose.yml"))
ISSUER = "secrets"
"""The one-shot service that makes every secret and fills each service's volume."""
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|_KEYS?$|_CLIENTS$")
PLACEHOLDER = re.compile(r"<[^<>]+>")


@functools.cache
def _resolved() -> dict[str, Any]:
    proc = subprocess.run(
        [*COMPOSE, "--profile", "observability", "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: dict[str, Any] = json.loads(proc.stdout)
    return loaded


def _module(service: dict[str, Any]) -> str | None:
    """The Chorus service a compose service runs (``python -m <its package>``), if it runs one."""
    command = service.get("command") or []
    if command[:2] != ["python", "-m"]:
        return None
    name = command[2].rpartition(".")[2]
    return name if command[2] == service_module(name) else None  # else a tool (chorus.tools.*)


def _named_volumes(service: dict[str, Any]) -> dict[str, str]:
    """Mount target -> named volume of a resolved service."""
    return {m["target"]: m["source"] for m in service.get("volumes", []) if m["type"] == "volume"}


def _env_files(service: dict[str, Any]) -> list[str]:
    return [f if isinstance(f, str) else f["path"] for f in service.get("env_file", [])]


def _assignments(path: Path) -> dict[str, str]:
    """NAME -> value of an env file's uncommented lines."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def _broker_properties() -> dict[str, str]:
    """The broker's settings: its KAFKA_* environment, and the properties the script it runs
    from a mounted file writes, with the shared ones of the file that script sources
    (deploy/shared/kafka-security.sh, mounted beside it)."""
    kafka = _resolved()["services"]["kafka"]
    found = {
        name.removeprefix("KAFKA_").lower().replace("_", "."): str(value)
        for name, value in (kafka.get("environment") or {}).items()
        if name.startswith("KAFKA_")
    }
    binds = {m["target"]: Path(m["source"]) for m in kafka.get("volumes", []) if m["type"] == "bind"}
    [script] = [binds[arg] for arg in kafka.get("command") or [] if arg in binds]
    text = script.read_text()
    for sourced in re.findall(r"^source (\S+)", text, flags=re.MULTILINE):
        text += binds[sourced].read_text()
    for line in text.splitlines():
        if re.fullmatch(r"[a-z][a-z0-9.-]*=.*", line):
            key, value = line.split("=", 1)
            found[key] = value
    return found


def test_kafka_takes_only_scram_over_tls_from_every_client() -> None:
    broker = _broker_properties()
    protocols = dict(pair.split(":") for pair in broker["listener.security.protocol.map"].split(","))
    listeners = {item.split("://")[0] for item in broker["listeners"].split(",")}
    assert listeners <= protocols.keys(), broker["listeners"]
    controllers = set(broker.get("controller.listener.names", "").split(","))
    for listener in listeners:
        wanted = {"SSL"} if listener in controllers else {"SASL_SSL"}
        assert protocols[listener] in wanted, f"listener {listener} speaks {protocols[listener]}"
    # The host's port reaches a listener too, and it is one of those above.
    published = [p for p in _resolved()["services"]["kafka"]["ports"] if p.get("host_ip") == "127.0.0.1"]
    advertised = {
        a.split("://")[1].rsplit(":")[1]: a.split("://")[0] for a in broker["advertised.listeners"].split(",")
    }
    for port in published:
        assert protocols[advertised[str(port["published"])]] == "SASL_SSL", port
    assert broker["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert broker["authorizer.class.name"].endswith("StandardAuthorizer")
    assert broker["allow.everyone.if.no.acl.found"] == "false"
    for name, service in _resolved()["services"].items():
        protocol = (service.get("environment") or {}).get("CHORUS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
        assert protocol == "SASL_SSL", f"{name} logs in with {protocol}"


def test_no_env_file_or_volume_is_shared_and_the_compose_file_holds_no_secret() -> None:
    written = _compose()["services"]
    users: dict[str, list[str]] = {}
    for name, service in written.items():
        for path in _env_files(service):
            users.setdefault(f"env_file {path}", []).append(name)
    for name, service in _resolved()["services"].items():
        for volume in set(_named_volumes(service).values()):
            if name != ISSUER:
                users.setdefault(f"volume {volume}", []).append(name)
    shared = {what: names for what, names in users.items() if len(names) > 1}
    assert not shared, shared
    for name, service in written.items():
        for variable, value in (service.get("environment") or {}).items():
            # Where a secret is (a file in the container) is no secret.
            names_a_file = variable.endswith("_FILE") and str(value).startswith("/")
            assert names_a_file or not SECRET_NAME.search(variable), (
                f"{name}: {variable} is a secret in the compose file"
            )
            assert "@" not in urlsplit(str(value)).netloc, f"{name}: {variable} carries a login"


def test_the_issuer_runs_once_before_the_infrastructure_and_serves_nothing() -> None:
    services = _compose()["services"]
    issuer = services[ISSUER]
    assert issuer.get("restart") == "no" and not issuer.get("ports")
    for infra in ("kafka", "postgres"):
        assert services[infra]["depends_on"][ISSUER] == {"condition": "service_completed_successfully"}


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Named volume -> its files, as the issuer leaves them: its command run on this
    machine with each of its mounts a folder."""
    return _issue(_resolved(), load_registry(ROOT / "schemas"), tmp_path_factory.mktemp("issued"))


def _issue(resolved: dict[str, Any], registry: Registry, tmp: Path) -> dict[str, Path]:
    issuer = resolved["services"].get(ISSUER)
    if issuer is None:
        return {}  # nothing is issued: every service's own share is missing
    [root] = [arg.removeprefix("--root=") for arg in issuer["command"] if arg.startswith("--root=")]
    [database] = [arg.split("=", 1)[1] for arg in issuer["command"] if arg.startswith("--database-url=")]
    volumes: dict[str, Path] = {}
    for target, volume in _named_volumes(issuer).items():
        volumes[volume] = tmp / "volumes" / volume
        volumes[volume].mkdir(parents=True)
        view = tmp / "root" / Path(target).relative_to(root)
        view.parent.mkdir(parents=True, exist_ok=True)
        view.symlink_to(volumes[volume])
    uid = os.geteuid()
    composesecrets.issue(
        composesecrets.Layout.under(tmp / "root"),
        registry,
        database,
        composesecrets.Owners(chorus=uid, kafka=uid),
    )
    return volumes


def _visible(service: dict[str, Any], issued: dict[str, Path]) -> dict[str, Path]:
    """Path inside the container -> the issued file it sees there."""
    seen = {}
    for target, volume in _named_volumes(service).items():
        for path in issued.get(volume, Path("/nonexistent")).rglob("*"):
            if path.is_file():
                seen[f"{target}/{path.relative_to(issued[volume])}"] = path
    return seen


def test_a_private_signing_key_is_seen_by_its_owner_only(issued: dict[str, Path]) -> None:
    registry = load_registry(ROOT / "schemas")
    signers = set(registry.signers())
    holders: dict[str, list[str]] = {}
    for name, service in _resolved()["services"].items():
        if name == ISSUER:
            continue
        signing_dir = (service.get("environment") or {}).get("CHORUS_SIGNING_DIR")
        keys = {Path(p).stem for p in _visible(service, issued) if p.endswith(".key")}
        for key in keys:
            holders.setdefault(key, []).append(name)
        module = _module(service)
        if signing_dir:
            [volume] = [
                v for t, v in _named_volumes(service).items() if f"{signing_dir}/".startswith(f"{t}/")
            ]
            sharing = [
                other
                for other, theirs in _resolved()["services"].items()
                if other not in (name, ISSUER) and volume in _named_volumes(theirs).values()
            ]
            assert not sharing, f"{name}'s signing keys ({volume}) are mounted by {sharing} too"
        if signing_dir and module in signers:
            assert f"{signing_dir}/{module}.key" in _visible(service, issued), f"{name} lacks its key"
    assert {key: names for key, names in holders.items() if len(names) != 1} == {}
    for key, [holder] in holders.items():
        assert _module(_resolved()["services"][holder]) == key, f"{holder} sees {key}'s private key"


def test_every_runtime_service_connects_to_postgres_as_its_own_role(issued: dict[str, Path]) -> None:
    registry = load_registry(ROOT / "schemas")
    runtime = {n for n, s in registry.principals.services.items() if s.kind == "runtime"}
    # The superuser's login is the provisioning service's (`setup`), where it has one.
    setup = _resolved()["services"].get("setup", {})
    admin_file = _visible(setup, issued).get(
        (setup.get("environment") or {}).get("CHORUS_CREDENTIALS_FILE", "")
    )
    admin = _assignments(admin_file) if admin_file else {}
    seen: dict[str, str] = {}
    for name, service in _resolved()["services"].items():
        module = _module(service)
        if module not in runtime:
            continue
        environment = service.get("environment") or {}
        credentials = _visible(service, issued).get(environment.get("CHORUS_CREDENTIALS_FILE", ""))
        assert credentials is not None, f"{name} gets no login of its own"
        url = urlsplit(shlex.split(_assignments(credentials)["CHORUS_DATABASE_URL"])[0])
        assert url.username == module, f"{name} connects as {url.username}"
        assert url.password and url.password not in seen.values(), f"{name} shares a password"
        assert url.password not in admin.get("CHORUS_DATABASE_URL", ""), (
            f"{name} has the superuser's password"
        )
        seen[name] = url.password
    assert {_module(_resolved()["services"][n]) for n in seen} == runtime
    # The roles behind those logins are made from the passwords the issuer wrote.
    assert "chorus access database --users-dir" in " ".join(setup["command"])


def test_sandbox_and_grafana_get_no_secrets(issued: dict[str, Path]) -> None:
    written = _compose()["services"]
    sandbox = _resolved()["services"]["sandbox"]
    assert not written["sandbox"].get("env_file"), "the sandbox reads an env file"
    assert not _visible(sandbox, issued) and not _named_volumes(sandbox), "the sandbox mounts a volume"
    assert not (sandbox.get("environment") or {}), sandbox.get("environment")
    grafana = written["grafana"]
    assert not _named_volumes(_resolved()["services"]["grafana"])
    [env_file] = _env_files(grafana)
    example = ROOT / f"{env_file}.example"
    assert example.is_file(), f"{env_file} has no committed example"
    assert set(_assignments(example)) == {"GF_SECURITY_ADMIN_PASSWORD"}


def test_every_env_file_example_is_production_with_placeholders_and_its_service_s_settings() -> None:
    for example in sorted((ROOT / "deploy" / "docker").rglob("*.env.example")):
        mode = _assignments(example).get("CHORUS_ENV", "production")
        assert mode == "production", f"{example.relative_to(ROOT)} ships CHORUS_ENV={mode}"
    written = _compose()["services"]
    examples = 0
    for name, service in written.items():
        module = _module(service)
        for path in _env_files(service):
            if (ROOT / path).is_file() and not (ROOT / f"{path}.example").is_file():
                continue  # committed and generated (schemas/http.yaml's URLs): no secret
            example = ROOT / f"{path}.example"
            assert example.is_file(), f"{name}: {path} has no committed example"
            examples += 1
            values = _assignments(example)
            for variable, value in values.items():
                if variable == "CHORUS_ENV":
                    assert value == "production", f"{example.name}: CHORUS_ENV={value}"
                else:
                    assert PLACEHOLDER.search(value), f"{example.name}: {variable} is not a <placeholder>"
            if module is not None:
                assert values.get("CHORUS_ENV") == "production", f"{example.name} is not in production mode"
                reads = {f"CHORUS_{field.upper()}" for field in settings_class(module).model_fields}
                unknown = set(values) - reads
                assert not unknown, f"{example.name} sets {unknown}, which {module} does not read"
    assert examples


def test_the_examples_give_a_key_service_credential_to_exactly_the_services_that_need_keys() -> None:
    """A service whose topics carry no personal field gets no key (the key service answers
    it 403): its file holds no credential, and the key service's names none for it."""
    registry = load_registry()
    env_dir = ROOT / "deploy" / "docker" / "env"
    holders = {
        example.name.removesuffix(".env.example")
        for example in env_dir.glob("*.env.example")
        if "CHORUS_KEY_SERVICE_API_KEY" in _assignments(example)
    }
    named = set(
        json.loads(_assignments(env_dir / "key_service.env.example")["CHORUS_KEY_SERVICE_CLIENTS"]).values()
    )
    needing = {
        s
        for s in registry.principals.services
        if registry.handles_personal(s) and "key_stores" in settings_class(s).model_fields
    }
    assert holders == named == needing


def test_the_outside_world_shares_no_network_with_the_key_service_kafka_or_postgres() -> None:
    """The sandbox stands in for what agents call out to: it reaches no data key, broker or
    database, and the key service is on no network the outside world shares."""
    services = _resolved()["services"]

    def networks(name: str) -> set[str]:
        return set(services[name].get("networks") or {"default"})

    outside = networks("sandbox")
    for inside in ("key_service", "kafka", "postgres"):
        assert not networks(inside) & outside, inside
    assert networks("payment_agent") & outside  # the agents do reach it


PUBLIC_FILES = re.compile(r"(\.pub|ca\.pem|key_service\.pem)$")
"""What the issuer may leave readable to others: public keys and certificates."""


def test_every_issued_secret_is_readable_by_its_owner_only(issued: dict[str, Path]) -> None:
    """Passwords, logins and private keys: mode 600 (folders 700), so that another user in
    the container, or on the host reading the volume, sees none of them."""
    loose = []
    for volume, folder in issued.items():
        for path in [folder, *folder.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            if path.is_file() and not PUBLIC_FILES.search(path.name) and mode & 0o077:
                loose.append(f"{volume}/{path.relative_to(folder)}: {oct(mode)}")
    assert issued and loose == []


def test_data_keys_travel_over_tls_to_a_certificate_every_caller_can_verify(issued: dict[str, Path]) -> None:
    """Every caller of the key service reaches it by https and holds the authority its
    certificate is verified with; the key service holds that certificate (for the name the
    callers use) and its private key, in its own volume."""
    services = _resolved()["services"]
    callers = 0
    for name, service in services.items():
        env = service.get("environment") or {}
        if "CHORUS_KEY_STORES" in env and name != ISSUER:
            callers += 1
            urls = json.loads(env["CHORUS_KEY_STORES"]).values()
            assert all(urlsplit(url).scheme == "https" for url in urls), name
            assert env["CHORUS_KEY_SERVICE_CA_FILE"] in _visible(service, issued), name
    assert callers >= len(SERVICES) - 1
    keys = services["key_service"]
    visible, env = _visible(keys, issued), keys["environment"]
    ca = x509.load_pem_x509_certificate(visible[env["CHORUS_KEY_SERVICE_CA_FILE"]].read_bytes())
    cert = x509.load_pem_x509_certificate(visible[env["CHORUS_KEY_SERVICE_TLS_CERT_FILE"]].read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "key_service" in names.get_values_for_type(x509.DNSName)
    assert env["CHORUS_KEY_SERVICE_TLS_KEY_FILE"] in visible
    assert stat.S_IMODE(visible[env["CHORUS_KEY_SERVICE_TLS_KEY_FILE"]].stat().st_mode) == 0o600


# -- a project's services (chorus deploy compose) -------------------------------------------------

SUPPORT = ROOT / "examples" / "support"
VOLUME = "triage_agent_secrets"
"""The project's service's own volume."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A copy of examples/support, the override `chorus deploy compose` writes into it, and
    docker-compose.yml with that override as `docker compose config` resolves them."""
    folder = tmp_path_factory.mktemp("project") / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns("__pycache__", ".chorus"))
    command = ["deploy", "compose", "--dir", str(folder), "--compose-file", str(ROOT / "docker-compose.yml")]
    done = CliRunner().invoke(app, command)
    assert done.exit_code == 0, done.output
    override = folder / "docker-compose.support.yml"
    assert done.output == f"wrote {override}\n"
    proc = subprocess.run(
        [*COMPOSE, "-f", str(override), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return folder, json.loads(proc.stdout)


def test_the_projects_override_runs_every_chorus_container_on_the_projects_image(
    project: tuple[Path, dict[str, Any]],
) -> None:
    """Every Chorus container reads the union registry: each builds the project's image
    (its Dockerfile, on the compose stack's image) from the project's folder."""
    folder, merged = project
    base = _resolved()["services"]
    chorus = [name for name, s in base.items() if (s.get("build") or {}).get("context") == str(ROOT)]
    assert {"secrets", "setup", "gateway", "sandbox"} <= set(chorus)
    for name in (*chorus, "triage_agent"):
        service = merged["services"][name]
        assert service["image"] == "support:0.1.0", name
        assert service["build"] == {
            "context": str(folder),
            "dockerfile": "Dockerfile",
            "args": {"CHORUS_IMAGE": base["secrets"]["image"]},
        }, name
    # Kafka and PostgreSQL are the stack's own.
    assert merged["services"]["kafka"]["image"] == base["kafka"]["image"]


def test_the_projects_service_runs_in_compose_like_the_platforms(
    project: tuple[Path, dict[str, Any]],
) -> None:
    _, merged = project
    services = merged["services"]
    triage, gateway = services["triage_agent"], services["gateway"]
    assert triage["command"] == ["python", "-m", "triage_agent"]
    port = settings_class("triage_agent").model_fields["http_port"].default
    assert f"http://127.0.0.1:{port}/health" in " ".join(triage["healthcheck"]["test"])
    assert [(p["host_ip"], p["published"], p["target"]) for p in triage["ports"]] == [
        ("127.0.0.1", str(port), port)
    ]
    # The platform's connections (Kafka over SCRAM/TLS, its own login file, keys over TLS),
    # and its project's dev settings with the compose stack's sandbox in them.
    env = triage["environment"]
    for name in ("CHORUS_KAFKA_SECURITY_PROTOCOL", "CHORUS_CREDENTIALS_FILE", "CHORUS_KEY_STORES"):
        assert env[name] == gateway["environment"][name], name
    assert env["CHORUS_CRM_URL"] == "http://sandbox:9400/crm"
    assert env["CHORUS_LLM_BASE_URL"] == "http://sandbox:9400/v1"
    assert services["sandbox"]["command"][-1] == "--plugin=support_sandbox"
    assert triage["depends_on"]["setup"]["condition"] == "service_completed_successfully"
    assert set(triage["networks"]) == set(gateway["networks"])
    # Its own secrets volume, which the issuer fills and no other container mounts.
    assert _named_volumes(triage) == {"/var/lib/chorus/secrets": VOLUME}
    assert _named_volumes(services[ISSUER])["/issue/services/triage_agent"] == VOLUME
    sharing = [
        name
        for name, s in services.items()
        if name not in ("triage_agent", ISSUER) and VOLUME in _named_volumes(s).values()
    ]
    assert sharing == []


def test_the_issuer_gives_the_projects_service_its_own_login_and_signing_key(
    project: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    folder, merged = project
    issued = _issue(merged, load_registry(folder / "schemas"), tmp_path)
    visible = _visible(merged["services"]["triage_agent"], issued)
    login = _assignments(visible["/var/lib/chorus/secrets/login.env"])
    assert login["CHORUS_KAFKA_SASL_USERNAME"] == "triage_agent"
    assert urlsplit(login["CHORUS_DATABASE_URL"]).username == "triage_agent"
    assert "/var/lib/chorus/secrets/signing/triage_agent.key" in visible
    assert not [p for p in visible if p.endswith(".key") and not p.endswith("/triage_agent.key")]


def test_deploy_compose_refuses_a_file_that_is_not_chorus_s(tmp_path: Path) -> None:
    other = tmp_path / "docker-compose.yml"
    other.write_text(yaml.safe_dump({"services": {"web": {"image": "nginx"}}}))
    command = ["deploy", "compose", "--dir", str(SUPPORT), "--compose-file", str(other)]
    done = CliRunner().invoke(app, command)
    assert done.exit_code == 2
    assert "not Chorus's compose file" in done.output


def test_the_compose_samples_are_the_local_ones_with_the_sandbox_as_the_services_reach_it() -> None:
    """deploy/docker/samples is what a compose stack's services can call (its sandbox on the
    compose network, which CHORUS_EGRESS_ALLOW lets through); nothing else differs."""
    local, docker = ROOT / "deploy" / "local" / "samples", ROOT / "deploy" / "docker" / "samples"
    assert sorted(p.name for p in docker.iterdir()) == sorted(p.name for p in local.iterdir())
    for sample in local.iterdir():
        text = sample.read_text()
        assert "http://127.0.0.1:9400" in text, sample.name
        assert json.loads((docker / sample.name).read_text()) == json.loads(
            text.replace("http://127.0.0.1:9400", "http://sandbox:9400")
        ), sample.name
    allowed = _compose()["x-chorus-env"]["CHORUS_EGRESS_ALLOW"]
    assert allowed == "sandbox:9400"
