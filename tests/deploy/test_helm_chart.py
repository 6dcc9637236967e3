"""The Helm chart (deploy/helm/chorus): it lints, renders, and every object it renders is
valid for its API (Kubernetes, KEDA, Strimzi, CloudNativePG: deploy/helm/validate), for the
default values and for every values file of ci/ and examples/; and what it renders keeps
the promises of the chart's README, checked here from the rendered objects and the
registry, not from the chart's own files:

- every service runs with probes, requests and limits, and as the image's non-root user with
  a read-only root, no privilege escalation, no capabilities and the runtime's seccomp profile;
- every Deployment has a PodDisruptionBudget;
- no secret value is rendered: secrets only by reference to existing Secrets;
- KEDA never scales a service beyond the partitions its consumer group reads, and never
  scales a platform service to zero.

helm and the validator come from `deploy/local/helm.sh ensure` (helm built from its Go
module, the validator's npm packages): without them these tests fail, never skip.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from chorus import __version__
from chorus.contracts.registry import Registry, load_registry
from chorus.privacy.feature import DEMO_SUBJECT_KEY
from chorus.tools import chart, dashboards
from chorus.tools.cli import migrate
from chorus.tools.cli.main import app
from chorus.tools.declarations import read_declarations, service_module
from chorus.tools.topics import overlaid, read_overlay
from tests.support.helm import (
    AGENTS,
    CHART,
    INVARIANTS,
    PLATFORM,
    RELEASE,
    ROOT,
    VALUES,
    Docs,
    containers,
    ensure_helm,
    group_topics,
    keda_problems,
    of_kind,
    parse,
    pdb_problems,
    run_helm,
    secret_problems,
    service_of,
    template,
    validate,
    values_args,
    workload_problems,
)


@pytest.fixture(scope="module")
def helm() -> str:
    return ensure_helm()


@pytest.fixture(scope="module")
def rendered(helm: str) -> dict[str, str]:
    return {name: template(helm, files) for name, files in VALUES.items()}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(ROOT / "schemas")


# -- the generated registry file ----------------------------------------------------------------


@pytest.mark.checkout
def test_the_committed_registry_file_is_what_the_generator_writes(registry: Registry) -> None:
    assert chart.CHART_FILE.read_text() == chart.render(registry), "run: python -m chorus.tools.chart"


@pytest.mark.checkout
def test_the_registry_file_has_every_service_and_its_partition_ceiling(registry: Registry) -> None:
    facts = yaml.safe_load(chart.CHART_FILE.read_text())
    assert set(facts["services"]) == {*registry.principals.services, "console"}
    for name, svc in facts["services"].items():
        if svc["consumerGroup"]:
            topics = set(svc["consumes"])
            assert topics <= group_topics(registry, name)
            assert svc["partitions"] == max(registry.topic_of_physical(t).partitions for t in topics)  # type: ignore[union-attr]


# -- lint, render, validate -------------------------------------------------------------------


@pytest.mark.parametrize("values", sorted(VALUES))
def test_helm_lint_strict_passes(helm: str, values: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), *values_args(VALUES[values]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize("values", sorted(VALUES))
def test_every_rendered_object_validates_against_its_api_schema(
    rendered: dict[str, str], values: str, tmp_path: Path
) -> None:
    report = validate(rendered[values], tmp_path)
    assert report["errors"] == [], json.dumps(report["errors"], indent=1)
    assert report["objects"] == len(parse(rendered[values])) > 0
    kinds = report["kinds"]
    assert kinds["apps/v1/Deployment"] == kinds["policy/v1/PodDisruptionBudget"] == 15
    if values == "all-on":
        for kind in (
            "keda.sh/v1alpha1/ScaledObject",
            "keda.sh/v1alpha1/TriggerAuthentication",
            "networking.k8s.io/v1/Ingress",
            "gateway.networking.k8s.io/v1/HTTPRoute",
            "kafka.strimzi.io/v1/Kafka",
            "kafka.strimzi.io/v1/KafkaNodePool",
            "kafka.strimzi.io/v1/KafkaTopic",
            "kafka.strimzi.io/v1/KafkaUser",
            "postgresql.cnpg.io/v1/Cluster",
            "batch/v1/Job",
        ):
            assert kinds.get(kind), f"all-on renders no {kind}"
        # Strimzi 1.0 serves v1 only: a v1beta2 object would not even be accepted by the API server.
        assert not [k for k in kinds if k.startswith("kafka.strimzi.io/") and "/v1/" not in k], kinds


def test_the_validator_reports_unknown_fields_wrong_types_and_unknown_kinds(
    rendered: dict[str, str], tmp_path: Path
) -> None:
    """The validation above can fail."""
    broken = (
        rendered["all-on"]
        .replace("readinessProbe:", "readinesProbe:", 1)
        .replace("minReplicaCount: 0", "minReplicaCount: none", 1)
        # What v1beta2 allowed and Strimzi's v1 removed: an ACL's singular `operation`.
        .replace('operations: ["Read"]', "operation: Read", 1)
    )
    broken += "\n---\napiVersion: example.com/v1\nkind: Unknown\nmetadata: {name: x}\n"
    report = validate(broken, tmp_path)
    messages = [f"{e['check']}: {e['message']}" for e in report["errors"]]
    assert any("readinesProbe" in m for m in messages), messages
    assert any("minReplicaCount" in m for m in messages), messages
    assert any("KafkaUser" in e["object"] and "operation" in e["message"] for e in report["errors"]), messages
    assert any("no schema for example.com/v1/Unknown" in m for m in messages), messages


# -- invariants -------------------------------------------------------------------------------


@pytest.mark.parametrize("values", sorted(VALUES))
def test_rendered_objects_keep_the_invariants(
    rendered: dict[str, str], registry: Registry, values: str
) -> None:
    text = rendered[values]
    docs = parse(text)
    for name, check in INVARIANTS.items():
        assert check(docs, text, registry) == [], name


def test_keda_scales_the_agents_and_never_a_platform_service_to_zero(
    rendered: dict[str, str], registry: Registry
) -> None:
    docs = parse(rendered["all-on"])
    deployments = {d["metadata"]["name"]: service_of(d) for d in of_kind(docs, "Deployment")}
    scaled = {
        deployments[s["spec"]["scaleTargetRef"]["name"]]: s["spec"] for s in of_kind(docs, "ScaledObject")
    }
    assert set(scaled) >= AGENTS
    assert all(scaled[a]["minReplicaCount"] == 0 for a in AGENTS)
    assert not PLATFORM & set(scaled)
    # The ceiling by default: the largest partition count among the topics the group reads.
    for service in AGENTS - {"invoice_agent"}:
        topics = {t["metadata"]["topic"] for t in scaled[service]["triggers"]}
        ceiling = max(registry.topic_of_physical(t).partitions for t in topics)  # type: ignore[union-attr]
        assert scaled[service]["maxReplicaCount"] == ceiling
    assert scaled["invoice_agent"]["maxReplicaCount"] == 4  # ci/all-on-values.yaml
    # A Deployment KEDA scales has no replicas of its own; the others keep theirs.
    for dep in of_kind(docs, "Deployment"):
        assert ("replicas" in dep["spec"]) == (service_of(dep) not in scaled)


def test_a_topics_overlay_lets_the_gate_scale_to_its_partitions_and_the_job_applies_it(
    helm: str, registry: Registry, tmp_path: Path
) -> None:
    overlay = tmp_path / "topics.yaml"
    overlay.write_text(yaml.safe_dump({"topics": {"approvals.events": {"partitions": 24}}}))
    sets = (
        "keda.enabled=true",
        "services.approval_gate.autoscaling.enabled=true",
        "strimzi.enabled=true",
        "database.maxConnections=5000",  # 24 gates' pools: a server sized for them
    )
    docs = parse(template(helm, [overlay], *sets))

    gate = next(s for s in of_kind(docs, "ScaledObject") if s["metadata"]["name"].endswith("approval-gate"))
    assert gate["spec"]["maxReplicaCount"] == 24
    topic = next(t for t in of_kind(docs, "KafkaTopic") if t["spec"]["topicName"] == "approvals.events")
    assert topic["spec"]["partitions"] == 24
    # Every ceiling is the most partitions among the deployed topics its triggers read.
    partitions = {t["spec"]["topicName"]: t["spec"]["partitions"] for t in of_kind(docs, "KafkaTopic")}
    grown = {spec.topic: spec for spec in overlaid(list(registry.topics.values()), read_overlay(overlay))}
    declared = {
        physical: spec.topic for spec in registry.topics.values() for physical in spec.physical_topics()
    }
    assert {name: grown[declared[name]].partitions for name in partitions} == partitions
    for scaled in of_kind(docs, "ScaledObject"):
        read = {t["metadata"]["topic"] for t in scaled["spec"]["triggers"]}
        assert scaled["spec"]["maxReplicaCount"] == max(partitions[t] for t in read)
    # Above 24 is still refused: a replica beyond the partitions owns nothing.
    done = run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        *values_args([overlay], (*sets, "services.approval_gate.autoscaling.maxReplicaCount=25")),
    )
    assert done.returncode != 0 and "maxReplicaCount 25: above 24" in done.stderr, done.stderr

    # Without Strimzi, the migrations job hands the same overlay to `chorus topics apply`.
    job = of_kind(parse(template(helm, [overlay])), "Job")[0]
    container = job["spec"]["template"]["spec"]["containers"][0]
    handed = next(e["value"] for e in container["env"] if e["name"] == "CHORUS_TOPICS_OVERLAY_YAML")
    assert yaml.safe_load(handed) == yaml.safe_load(overlay.read_text())


def full_scale_connections(docs: Docs, registry: Registry, per_replica_beside_pool: int) -> int:
    """PostgreSQL connections of the rendered release at full scale, counted from what it
    runs: each Deployment of a service with a database at its replicas (KEDA's
    maxReplicaCount when scaled), each replica its pool and ``per_replica_beside_pool``."""
    scaled = {
        s["spec"]["scaleTargetRef"]["name"]: s["spec"]["maxReplicaCount"]
        for s in of_kind(docs, "ScaledObject")
    }
    total = 1  # the migrations job
    for deployment in of_kind(docs, "Deployment"):
        env = {e["name"]: e.get("value") for _, c in containers([deployment]) for e in c.get("env", [])}
        if "CHORUS_DATABASE_URL" not in env:
            continue
        replicas = scaled.get(deployment["metadata"]["name"], deployment["spec"].get("replicas", 1))
        total += replicas * (int(env.get("CHORUS_DB_POOL_SIZE") or 10) + per_replica_beside_pool)
    return total


def test_the_chart_refuses_a_connection_plan_above_the_databases_limit(helm: str, registry: Registry) -> None:
    sets = (
        "keda.enabled=true",
        "services.gateway.env.CHORUS_DB_POOL_SIZE=20",
        "database.reservedConnections=3",
    )
    unlimited = template(helm, [], *sets, "database.maxConnections=100000")
    needed = full_scale_connections(parse(unlimited), registry, per_replica_beside_pool=5)
    assert needed > 400  # KEDA's full scale-out on the defaults: more than the default limit

    # Exactly enough renders (template() asserts it), and CloudNativePG gets that limit.
    rendered = template(
        helm, [], *sets, f"database.maxConnections={needed + 3}", "cloudnativepg.enabled=true"
    )
    assert f'max_connections: "{needed + 3}"' in rendered
    done = run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        *values_args([], (*sets, f"database.maxConnections={needed + 2}")),
    )
    assert done.returncode != 0, "one connection over the limit was accepted"
    assert f"at full scale the release opens {needed} PostgreSQL connections" in done.stderr, done.stderr
    assert f"allows {needed - 1}" in done.stderr and "database.pgbouncer" in done.stderr


def test_behind_the_pooler_services_pool_through_pgbouncer_and_lock_and_migrate_directly(helm: str) -> None:
    docs = parse(
        template(
            helm, [], "cloudnativepg.enabled=true", "database.pgbouncer.enabled=true", "keda.enabled=true"
        )
    )
    (pooler,) = of_kind(docs, "Pooler")
    assert pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"
    assert pooler["metadata"]["name"] == "chorus-pg-pooler-rw"
    for deployment in of_kind(docs, "Deployment"):
        env = {e["name"]: e.get("value") for _, c in containers([deployment]) for e in c.get("env", [])}
        if "CHORUS_DATABASE_URL" in env:
            assert "@chorus-pg-pooler-rw:5432/" in env["CHORUS_DATABASE_URL"]
            assert "@chorus-pg-rw:5432/" in env["CHORUS_DATABASE_DIRECT_URL"]
            assert env["CHORUS_DATABASE_POOL_MODE"] == "transaction"
    job = of_kind(docs, "Job")[0]
    urls = [
        e["value"]
        for _, c in containers([job])
        for e in c["env"]
        if e["name"].startswith("CHORUS_DATABASE_URL_")
    ]
    assert urls and all("@chorus-pg-rw:5432/" in url for url in urls)
    # KEDA's full scale-out, refused on the default 400 directly, fits through the pooler.
    (cluster,) = of_kind(docs, "Cluster")
    assert cluster["spec"]["postgresql"]["parameters"]["max_connections"] == "400"
    # An external database: your PgBouncer behind urlSecret, PostgreSQL itself behind directUrlSecret.
    external = parse(template(helm, [], "database.pgbouncer.enabled=true"))
    gateway = next(d for d in of_kind(external, "Deployment") if service_of(d) == "gateway")
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
        for _, c in containers([gateway])
        for e in c["env"]
        if "valueFrom" in e and e["name"].startswith("CHORUS_DATABASE")
    }
    assert refs == {
        "CHORUS_DATABASE_URL": "chorus-db-gateway",
        "CHORUS_DATABASE_DIRECT_URL": "chorus-db-direct-gateway",
    }


def test_analytics_replicas_split_its_partitions_and_keep_standby_copies_of_the_rest(helm: str) -> None:
    """Outcome analytics' replicas share one group over its own topics: the chart tells each
    the partitions to create, one standby copy per other replica (so any answers for the
    whole view), and the replication the cluster gives its topics."""
    for sets, expected in (
        ((), {"CHORUS_PARTITIONS": "6", "CHORUS_STANDBY_REPLICAS": "0", "CHORUS_REPLICATION_FACTOR": "3"}),
        (
            (
                "services.outcome_analytics.replicas=12",
                "services.outcome_analytics.partitions=12",
                "services.outcome_analytics.replicationFactor=2",
            ),
            {"CHORUS_PARTITIONS": "12", "CHORUS_STANDBY_REPLICAS": "11", "CHORUS_REPLICATION_FACTOR": "2"},
        ),
    ):
        docs = parse(template(helm, [], *sets))
        analytics = next(d for d in of_kind(docs, "Deployment") if service_of(d) == "outcome_analytics")
        env = {e["name"]: e.get("value") for _, c in containers([analytics]) for e in c.get("env", [])}
        assert {k: env.get(k) for k in expected} == expected, sets
        # No other service gets them.
        others = [d for d in of_kind(docs, "Deployment") if service_of(d) != "outcome_analytics"]
        names = {e["name"] for _, c in containers(others) for e in c["env"]}
        assert "CHORUS_STANDBY_REPLICAS" not in names


def test_no_secret_value_is_rendered_even_with_every_secret_configured(helm: str, tmp_path: Path) -> None:
    """Every secret setting named (by Secret and key), the demo values nowhere in the output."""
    secret_values = tmp_path / "secrets.yaml"
    secret_values.write_text(
        yaml.safe_dump(
            {
                "secrets": {
                    "CHORUS_API_KEYS": {"name": "prod-api-keys", "key": "keys.json"},
                    "CHORUS_WEBHOOK_SECRET": {"name": "prod-gateway", "key": "webhook"},
                    "CHORUS_PAYMENT_API_KEY": {"name": "prod-payments", "key": "key"},
                    "CHORUS_MASTER_KEYS": {"name": "prod-master-keys", "key": "keys.json"},
                    "CHORUS_SUBJECT_KEY": {"name": "prod-subject", "key": "key"},
                    "CHORUS_LLM_API_KEY": {"name": "prod-llm", "key": "key"},
                },
                "kafka": {"caSecret": {"name": "prod-kafka-ca", "key": "ca.crt"}},
            }
        )
    )
    for files in ([secret_values], [CHART / "ci" / "all-on-values.yaml", secret_values]):
        text = template(helm, files)
        docs = parse(text)
        assert secret_problems(docs, text) == []
        assert "kind: Secret" not in text
        assert "name: prod-master-keys" in text and "name: prod-api-keys" in text
    assert "secretName: prod-kafka-ca" in template(helm, [secret_values])


# -- the checks can fail ------------------------------------------------------------------------


def test_each_invariant_check_reports_a_violation(rendered: dict[str, str], registry: Registry) -> None:
    docs = parse(rendered["all-on"])
    text = rendered["all-on"]

    def deployment(service: str, in_docs: Docs) -> dict[str, Any]:
        return next(d for d in of_kind(in_docs, "Deployment") if service_of(d) == service)

    broken = copy.deepcopy(docs)
    container = deployment("budget_agent", broken)["spec"]["template"]["spec"]["containers"][0]
    del container["readinessProbe"]
    del container["resources"]["limits"]
    container["securityContext"]["runAsUser"] = 0
    container["securityContext"]["readOnlyRootFilesystem"] = False
    problems = workload_problems(broken)
    for expected in ("no readinessProbe", "no limits.cpu", "runAsUser", "readOnlyRootFilesystem"):
        assert any(expected in p for p in problems), (expected, problems)

    broken = [
        d for d in docs if not (d["kind"] == "PodDisruptionBudget" and "gateway" in d["metadata"]["name"])
    ]
    assert any("gateway" in p for p in pdb_problems(broken))

    broken = copy.deepcopy(docs)
    env = deployment("payment_agent", broken)["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "CHORUS_PAYMENT_API_KEY", "value": "from-values"})
    broken.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "b"}})
    problems = secret_problems(broken, text + f"\n# {DEMO_SUBJECT_KEY}\n")
    assert any("CHORUS_PAYMENT_API_KEY is not taken from a Secret" in p for p in problems), problems
    assert any("a Secret is rendered" in p for p in problems), problems
    assert any(DEMO_SUBJECT_KEY in p for p in problems), problems

    broken = copy.deepcopy(docs)
    scaled = next(s for s in of_kind(broken, "ScaledObject") if "budget-agent" in s["metadata"]["name"])
    scaled["spec"]["maxReplicaCount"] = 99
    timer = copy.deepcopy(scaled)
    timer["spec"]["scaleTargetRef"]["name"] = deployment("timer_service", broken)["metadata"]["name"]
    timer["spec"]["minReplicaCount"] = 0
    broken.append(timer)
    problems = keda_problems(broken, registry)
    assert any("maxReplicaCount 99 > 6 partitions" in p for p in problems), problems
    assert any("platform service timer_service may be scaled to zero" in p for p in problems), problems


@pytest.mark.parametrize(
    ("sets", "refusal"),
    [
        (
            ("keda.enabled=true", "services.budget_agent.autoscaling.maxReplicaCount=7"),
            "maxReplicaCount 7: above 6",
        ),
        (
            (
                "keda.enabled=true",
                "services.gateway.autoscaling.enabled=true",
                "services.gateway.autoscaling.minReplicaCount=0",
            ),
            "a platform service is never scaled to zero",
        ),
        (("services.timer_service.replicas=0",), "a platform service runs at least one replica"),
        (("keda.enabled=true", "services.console.autoscaling.enabled=true"), "has no consumer group"),
        (("services.invoce_agent.enabled=false",), "no such service in the registry"),
        (("services.gateway.env.CHORUS_NO_SUCH_SETTING=1",), "is not a setting of gateway"),
        (("services.payment_agent.env.CHORUS_PAYMENT_API_KEY=plain",), "is a secret"),
        # A deployment's topics: never below the registry's, and only the registry's topics.
        (
            ("topics.approvals\\.events.partitions=4",),
            "topics.approvals.events.partitions 4: below the registry's 6",
        ),
        (
            ("topics.approvals\\.events.retention_ms=3600000",),
            "topics.approvals.events.retention_ms 3600000: shorter than the registry's 2592000000",
        ),
        (("topics.approval\\.events.partitions=24",), "topics.approval.events: not a topic of the registry"),
        (
            (
                "cloudnativepg.enabled=true",
                "database.pgbouncer.enabled=true",
                "database.pgbouncer.maxClientConnections=50",
            ),
            "above its 2 instances x 50 maxClientConnections",
        ),
        (("gatewayApi.enabled=true",), "gatewayApi.enabled needs gatewayApi.parentRefs"),
        (
            ("services.outcome_analytics.replicas=7",),
            "services.outcome_analytics.replicas 7: more than its 6 partitions",
        ),
    ],
)
def test_the_chart_refuses_values_that_break_an_invariant(
    helm: str, sets: tuple[str, ...], refusal: str
) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), *values_args([], sets))
    assert done.returncode != 0 and refusal in done.stderr, done.stderr


# -- network policies -----------------------------------------------------------------------------


def test_network_policies_deny_by_default_and_open_only_the_implied_paths(rendered: dict[str, str]) -> None:
    docs = parse(rendered["default"])
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    deny = policies[f"{RELEASE}-default-deny"]
    assert deny["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny and "egress" not in deny

    def sources(service: str) -> list[dict[str, Any]]:
        return [peer for rule in policies[f"{RELEASE}-{service}"]["ingress"] for peer in rule["from"]]

    def component(peer: dict[str, Any]) -> str | None:
        labels: dict[str, str] = (peer.get("podSelector") or {}).get("matchLabels") or {}
        return None if "namespaceSelector" in peer else labels.get("app.kubernetes.io/component")

    # The console calls the gateway's API; every service that seals data calls the key service.
    assert "console" in {component(p) for p in sources("gateway")}
    key_callers = {component(p) for p in sources("key-service")} - {None}
    assert {"gateway", "invoice-agent", "timer-service"} <= key_callers
    assert "console" not in key_callers
    # An agent's API is called by nobody in the release: only Prometheus reaches it.
    assert [component(p) for p in sources("budget-agent")] == [None]
    # Outside calls only where the values allow them (an LLM, a payment provider, sources, mail).
    for service in ("invoice-agent", "payment-agent", "report-agent", "source-fetcher", "notifier"):
        assert any("ipBlock" in str(r) for r in policies[f"{RELEASE}-{service}"]["egress"]), service
    assert not any("ipBlock" in str(r) for r in policies[f"{RELEASE}-budget-agent"]["egress"])


def test_data_keys_travel_over_tls_to_the_key_services_api_port_only(rendered: dict[str, str]) -> None:
    """The key service serves data keys over TLS only, with the certificate of
    keyServiceTls.secret; its callers reach it by https on its api port, verify it with that
    Secret's ca.crt (and get nothing else of it), and the network policy opens that port to
    them; a service that handles no personal field gets no route and no certificate."""
    docs = parse(rendered["default"])
    pods = {service_of(d): d["spec"]["template"]["spec"] for d in of_kind(docs, "Deployment")}

    def env(service: str) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in pods[service]["containers"][0]["env"]}

    def tls_items(service: str) -> list[str]:
        volumes = [v for v in pods[service]["volumes"] if v["name"] == "key-service-tls"]
        return [
            i["key"]
            for v in volumes
            for i in v["secret"]["items"]
            if v["secret"]["secretName"] == "chorus-key-service-tls"
        ]

    mount = "/etc/chorus/key-service-tls"
    assert env("key_service")["CHORUS_KEY_SERVICE_TLS_CERT_FILE"] == f"{mount}/tls.crt"
    assert env("key_service")["CHORUS_KEY_SERVICE_TLS_KEY_FILE"] == f"{mount}/tls.key"
    assert env("key_service")["CHORUS_API_PORT"] == "8127"
    assert tls_items("key_service") == ["tls.crt", "tls.key"]
    budget = env("budget_agent")
    assert json.loads(budget["CHORUS_KEY_STORES"]) == {"local": f"https://{RELEASE}-key-service:8127"}
    assert budget["CHORUS_KEY_SERVICE_CA_FILE"] == f"{mount}/ca.crt"
    assert tls_items("budget_agent") == ["ca.crt"]
    assert "CHORUS_KEY_STORES" not in env("source_fetcher") and tls_items("source_fetcher") == []
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    to_keys = [
        port["port"]
        for rule in policies[f"{RELEASE}-budget-agent"]["egress"]
        for peer in rule.get("to", [])
        if (peer.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component")
        == "key-service"
        for port in rule["ports"]
    ]
    assert to_keys == [8127]


# -- public routes: the Ingress and the Gateway API --------------------------------------------------


def public_backends(docs: Docs) -> dict[str, dict[str, tuple[str, int]]]:
    """host -> (Service, port number) for the Ingress and for the HTTPRoutes, every Service
    port resolved to its number and checked to reach a named container port of the pods the
    Service selects."""
    pods = {
        tuple(sorted(d["spec"]["selector"]["matchLabels"].items())): {
            p["name"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]
        }
        for d in of_kind(docs, "Deployment")
    }
    ports: dict[str, dict[str | int, int]] = {}
    for svc in of_kind(docs, "Service"):
        container_ports = pods[tuple(sorted(svc["spec"]["selector"].items()))]
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in container_ports, (svc["metadata"]["name"], p)
            ports.setdefault(svc["metadata"]["name"], {}).update({p["name"]: p["port"], p["port"]: p["port"]})
    found: dict[str, dict[str, tuple[str, int]]] = {"Ingress": {}, "HTTPRoute": {}}
    for ingress in of_kind(docs, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            [path] = rule["http"]["paths"]
            backend = path["backend"]["service"]
            found["Ingress"][rule["host"]] = (
                backend["name"],
                ports[backend["name"]][backend["port"]["name"]],
            )
    for route in of_kind(docs, "HTTPRoute"):
        [rule] = route["spec"]["rules"]
        assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
        [ref] = rule["backendRefs"]
        for host in route["spec"]["hostnames"]:
            found["HTTPRoute"][host] = (ref["name"], ports[ref["name"]][ref["port"]])
    return found


def test_gateway_api_routes_serve_the_ingress_sites_on_the_same_service_ports(
    rendered: dict[str, str], helm: str
) -> None:
    """gatewayApi.enabled: an HTTPRoute per public site, attached to the values' Gateway, for
    the Ingress's host, to the Service port the Ingress names (the gateway's `api`, the
    console's `http`), by number as the Gateway API asks; the Gateway's proxies may reach
    those ports; alone (no Ingress) its hosts are the public addresses services hand out."""
    beside = parse(rendered["all-on"])
    backends = public_backends(beside)
    assert backends["HTTPRoute"] == backends["Ingress"]
    assert backends["Ingress"] == {
        "api.chorus.example.com": (f"{RELEASE}-gateway", 8080),
        "console.chorus.example.com": (f"{RELEASE}-console", 8120),
    }
    for route in of_kind(beside, "HTTPRoute"):
        assert route["spec"]["parentRefs"] == [
            {"name": "public", "namespace": "gateway-system", "sectionName": "https"}
        ]
    assert not of_kind(parse(rendered["default"]), "HTTPRoute")

    alone = parse(
        template(
            helm,
            [],
            "gatewayApi.enabled=true",
            "gatewayApi.parentRefs[0].name=public",
            "gatewayApi.scheme=http",
            "gatewayApi.console.hostnames[0]=chorus.example.com",
        )
    )
    assert not of_kind(alone, "Ingress")
    assert public_backends(alone)["HTTPRoute"] == {
        "api.chorus.example.com": (f"{RELEASE}-gateway", 8080),
        "chorus.example.com": (f"{RELEASE}-console", 8120),
    }
    env = {
        service_of(d): {
            e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        for d in of_kind(alone, "Deployment")
    }
    assert env["gateway"]["CHORUS_PUBLIC_URL"] == "http://api.chorus.example.com"
    assert env["notifier"]["CHORUS_CONSOLE_URL"] == "http://chorus.example.com"
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(alone, "NetworkPolicy")}
    for service, port in (("gateway", 8080), ("console", 8120)):
        from_proxies = [
            [p["port"] for p in rule["ports"]]
            for rule in policies[f"{RELEASE}-{service}"]["ingress"]
            for peer in rule["from"]
            if (peer.get("namespaceSelector") or {}).get("matchLabels")
            == {"kubernetes.io/metadata.name": "envoy-gateway-system"}
        ]
        assert from_proxies == [[port]], (service, from_proxies)


# -- CloudNativePG: verified TLS ---------------------------------------------------------------------


def test_every_connection_to_cloudnativepg_verifies_the_server_against_the_clusters_ca(
    rendered: dict[str, str], registry: Registry
) -> None:
    """cloudnativepg.enabled: every DSN (each service's, the job's per service and its admin
    one) asks for sslmode=verify-full, which asyncpg reads from the DSN: the server's
    certificate must be signed by the CA in sslrootcert and name the DSN's host. That file
    is the ca.crt of the Secret the operator publishes (<cluster>-ca), mounted where the DSN
    says, and nothing else of that Secret (its ca.key) is mounted."""
    text = rendered["cloudnativepg-example"]
    assert "sslmode=require" not in text
    docs = parse(text)
    with_dsn: dict[str, set[str]] = {}
    for doc in [*of_kind(docs, "Deployment"), *of_kind(docs, "Job")]:
        pod = doc["spec"]["template"]["spec"]
        [container] = pod["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod["volumes"]}
        for env in container["env"]:
            if not env["name"].startswith(("CHORUS_DATABASE_URL", "CHORUS_DATABASE_ADMIN_URL")):
                continue
            dsn = urlsplit(env["value"])
            assert dsn.hostname == "chorus-pg-rw", env
            query = parse_qs(dsn.query)
            assert query["sslmode"] == ["verify-full"], env
            [ca_file] = query["sslrootcert"]
            directory, _, filename = ca_file.rpartition("/")
            secret = volumes[mounts[directory]]["secret"]
            assert secret["secretName"] == "chorus-pg-ca"
            assert secret["items"] == [{"key": "ca.crt", "path": filename}]
            with_dsn.setdefault(doc["kind"], set()).add(env["name"])
    services = migrate.migrating_services(registry)
    assert with_dsn["Deployment"] == {"CHORUS_DATABASE_URL"}
    deployments_with_dsn = {
        service_of(d)
        for d in of_kind(docs, "Deployment")
        if any(
            e["name"] == "CHORUS_DATABASE_URL" for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
        )
    }
    assert deployments_with_dsn == set(services)
    assert with_dsn["Job"] == {
        "CHORUS_DATABASE_ADMIN_URL",
        *(f"CHORUS_DATABASE_URL_{s.upper()}" for s in services),
    }


# -- chorus migrate (the migration job's command) -------------------------------------------------


def test_the_job_migrates_exactly_the_services_chorus_migrate_knows(
    rendered: dict[str, str], registry: Registry
) -> None:
    job = of_kind(parse(rendered["default"]), "Job")[0]
    container = job["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][-1]
    assert "&& chorus topics apply --overlay /tmp/topics.yaml && chorus migrate " in script
    named = re.findall(r"--service (\S+)", script)
    assert named == migrate.migrating_services(registry)
    env = {e["name"] for e in container["env"]}
    assert {f"CHORUS_DATABASE_URL_{s.upper()}" for s in named} <= env
    for service in named:  # each one's declaration loads by name, as the job will load it
        assert migrate.service_spec(service).name == service


def test_production_pods_run_the_platform_image_and_only_the_reference_services_the_reference_one(
    helm: str,
) -> None:
    """The platform's image leaves the reference workflows out (deploy/docker/Dockerfile): a
    reference service on it would not start. Both images are tagged with the one version."""
    docs = parse(template(helm, VALUES["default"]))
    pods = {
        service_of(d): d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in of_kind(docs, "Deployment")
    }
    reference = {s for s in pods if service_module(s).startswith("chorus.reference.")}
    assert reference == AGENTS
    assert {s: pods[s] for s in reference} == dict.fromkeys(reference, f"chorus-reference:{__version__}")
    platform = set(pods) - reference
    assert {s: pods[s] for s in platform} == dict.fromkeys(platform, f"chorus:{__version__}")
    # The job migrates the reference agents' tables too: it runs from the image that has their code.
    [job] = of_kind(docs, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"chorus-reference:{__version__}"
    without = parse(template(helm, VALUES["default"], *(f"services.{s}.enabled=false" for s in AGENTS)))
    [job] = of_kind(without, "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"chorus:{__version__}"


def test_the_chart_package_and_services_carry_one_version(registry: Registry) -> None:
    """chorus.__version__ is the one source: the package's (pyproject.toml reads it), the
    chart's and its default image tag, and the version every service states as producer."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    declared = read_declarations(registry)
    specs = {name: d.spec.version for name, d in declared.services.items() if d.spec is not None}
    assert len(specs) >= 12, declared.missing
    assert specs == dict.fromkeys(specs, __version__)


def test_chorus_migrate_takes_each_services_own_dsn_and_refuses_unknown_services() -> None:
    env = {"CHORUS_DATABASE_URL_GATEWAY": "postgresql://gateway@db/chorus"}
    assert (
        migrate.database_url("gateway", env, "postgresql://all@db/chorus") == "postgresql://gateway@db/chorus"
    )
    assert migrate.database_url("notifier", env, "postgresql://all@db/chorus") == "postgresql://all@db/chorus"
    result = CliRunner().invoke(app, ["migrate", "--service", "sandbox"])
    assert result.exit_code == 2
    assert "not a service that keeps data: sandbox" in result.output


def test_with_monitoring_on_prometheus_gets_the_alert_rules_and_grafana_the_dashboards(
    rendered: dict[str, str],
) -> None:
    """The same rules promtool tests and the same dashboards `make docs` writes, labelled as
    `make observe` labels its targets (service, job), for the operator's CRDs and Grafana's
    dashboard sidecar."""
    docs = parse(rendered["all-on"])
    [monitor] = of_kind(docs, "ServiceMonitor")
    relabels = {r["targetLabel"]: r for r in monitor["spec"]["endpoints"][0]["relabelings"]}
    assert relabels["service"]["sourceLabels"] == ["__meta_kubernetes_service_label_chorus_dev_service"]
    assert relabels["job"]["replacement"] == "chorus"
    services = {s["metadata"]["labels"]["chorus.dev/service"] for s in of_kind(docs, "Service")}
    assert services >= AGENTS | PLATFORM
    [rule] = of_kind(docs, "PrometheusRule")
    alerts = yaml.safe_load((ROOT / "deploy" / "observability" / "prometheus" / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]
    [board] = [
        c for c in of_kind(docs, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert {name: json.loads(text) for name, text in board["data"].items()} == {
        name: json.loads(text) for name, text in dashboards.rendered().items()
    }
    assert not [d for d in parse(rendered["default"]) if d["kind"] in ("ServiceMonitor", "PrometheusRule")]


# -- a project's chart (chorus deploy helm) -------------------------------------------------------

SUPPORT = ROOT / "examples" / "support"
PROJECT_VALUES: dict[str, list[Path]] = {
    "default": [],
    "external": [CHART / "ci" / "external-values.yaml"],
    "strimzi-example": [CHART / "examples" / "strimzi-values.yaml"],
    "cloudnativepg-example": [CHART / "examples" / "cloudnativepg-values.yaml"],
}
"""The platform chart's values that name no reference service (a project's chart has none)."""


def deploy_helm(project: Path, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, ["deploy", "helm", "--dir", str(project), *args])
    return done.exit_code, done.output


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/support with the chart `chorus deploy helm` writes into it."""
    folder = tmp_path_factory.mktemp("project") / "support"
    shutil.copytree(SUPPORT, folder, ignore=shutil.ignore_patterns("__pycache__", ".chorus"))
    code, output = deploy_helm(folder)
    assert code == 0, output
    return folder


@pytest.fixture(scope="module")
def project_registry(project: Path) -> Registry:
    return load_registry(project / "schemas")


@pytest.fixture(scope="module")
def project_rendered(helm: str, project: Path) -> dict[str, str]:
    chart = project / "deploy" / "helm" / "chorus"
    return {name: template(helm, files, chart=chart) for name, files in PROJECT_VALUES.items()}


@pytest.mark.parametrize("values", sorted(PROJECT_VALUES))
def test_a_projects_chart_lints_validates_and_keeps_the_invariants(
    helm: str,
    project: Path,
    project_rendered: dict[str, str],
    project_registry: Registry,
    values: str,
    tmp_path: Path,
) -> None:
    """The chart with the project's services passes what the platform's passes: helm lint,
    every object valid for its API, probes, security context, PDBs, no secret, KEDA bounds."""
    chart = project / "deploy" / "helm" / "chorus"
    linted = run_helm(helm, "lint", "--strict", str(chart), *values_args(PROJECT_VALUES[values]))
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "[WARNING]" not in linted.stdout and "[ERROR]" not in linted.stdout, linted.stdout
    text = project_rendered[values]
    report = validate(text, tmp_path)
    assert report["errors"] == [], json.dumps(report["errors"], indent=1)
    docs = parse(text)
    for name, check in INVARIANTS.items():
        assert check(docs, text, project_registry) == [], name


def test_a_projects_chart_runs_its_services_and_the_platforms_from_its_image(
    helm: str, project: Path, project_rendered: dict[str, str]
) -> None:
    docs = parse(project_rendered["default"])
    pods = {
        service_of(d): d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in of_kind(docs, "Deployment")
    }
    assert "triage_agent" in pods
    assert not AGENTS & set(pods), "the reference workflows are not the project's"
    assert set(pods) >= PLATFORM
    # Every service reads the union registry: the project's image, <name>:<version> by default.
    assert set(pods.values()) == {"support:0.1.0"}
    [job] = of_kind(docs, "Job")
    job_container = job["spec"]["template"]["spec"]["containers"][0]
    assert job_container["image"] == "support:0.1.0"
    assert "--service triage_agent" in job_container["command"][-1]
    # Its own NetworkPolicy (deny by default: the key service and Kafka, no outside call).
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    assert not any("ipBlock" in str(r) for r in policies[f"{RELEASE}-triage-agent"]["egress"])
    key_callers = [peer for rule in policies[f"{RELEASE}-key-service"]["ingress"] for peer in rule["from"]]
    callers = {
        ((p.get("podSelector") or {}).get("matchLabels") or {}).get("app.kubernetes.io/component")
        for p in key_callers
    }
    assert "triage-agent" in callers
    # Its principal with exactly its ACLs (Strimzi), its topic made with the registry's partitions.
    strimzi = parse(project_rendered["strimzi-example"])
    users = {u["metadata"]["name"]: u["spec"] for u in of_kind(strimzi, "KafkaUser")}
    acls = users["triage-agent"]["authorization"]["acls"]
    assert {"type": "topic", "name": "support.tickets", "patternType": "literal"} in [
        {k: a["resource"][k] for k in ("type", "name", "patternType")} for a in acls
    ]
    topics = {t["spec"].get("topicName", t["metadata"]["name"]) for t in of_kind(strimzi, "KafkaTopic")}
    assert "support.tickets" in topics
    # A registry of its own image.
    moved = parse(
        template(
            helm,
            [],
            "projectImage.repository=registry.example/support",
            "projectImage.tag=2.0.0",
            chart=project / "deploy" / "helm" / "chorus",
        )
    )
    images = {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in of_kind(moved, "Deployment")}
    assert images == {"registry.example/support:2.0.0"}


def test_deploy_helm_says_when_the_chart_is_stale_and_refuses_outside_a_project(
    project: Path, tmp_path: Path
) -> None:
    up_to_date = f"{project}/deploy/helm/chorus: the chart of support (0 files written or removed)\n"
    assert deploy_helm(project, "--check") == (0, up_to_date)
    copy_ = tmp_path / "support"
    shutil.copytree(project, copy_, ignore=shutil.ignore_patterns("__pycache__"))
    # The registry changed (a new topic): the chart's registry file no longer says what runs.
    topic = copy_ / "schemas" / "topics" / "support.tickets.yaml"
    topic.write_text(topic.read_text().replace("partitions: 3", "partitions: 12"))
    code, output = deploy_helm(copy_, "--check")
    assert code == 1
    assert f"{copy_}/deploy/helm/chorus/files/registry.yaml is stale" in output
    assert deploy_helm(copy_)[0] == 0
    assert deploy_helm(copy_, "--check")[0] == 0
    assert "partitions: 12" in (copy_ / "deploy" / "helm" / "chorus" / "files" / "registry.yaml").read_text()
    code, output = deploy_helm(tmp_path / "nowhere")
    assert code == 2 and "is not in a project" in output
