"""Rendering the Helm chart and checking what it renders (tests/deploy/test_helm_chart.py, and
the tutorial's deployment of its project): helm and the validator from `deploy/local/helm.sh
ensure`, and the chart README's promises as checks that each return what is wrong."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from chorus.base.settings import DEMO_DATABASE_PASSWORD, DEMO_KEY_SERVICE_CLIENT, LOCAL_DATABASE_URL
from chorus.contracts.registry import RUNTIME_PRODUCER, Registry
from chorus.platform.console.config import DEMO_SESSION_KEY
from chorus.platform.gateway.config import DEMO_WEBHOOK_SECRET
from chorus.platform.key_service.config import DEMO_MASTER_KEYS
from chorus.privacy.feature import DEMO_SUBJECT_KEY
from chorus.reference.payment_agent.config import DEMO_PAYMENT_API_KEY
from chorus.tools.declarations import service_module
from chorus.web.apikeys import DEMO_KEYS
from chorus.web.links import DEMO_LINK_KEY

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "chorus"
VALIDATOR = ROOT / "deploy" / "helm" / "validate" / "validate.mjs"
HELM_SH = ROOT / "deploy" / "local" / "helm.sh"
RELEASE = "chorus"

VALUES: dict[str, list[Path]] = {
    "default": [],
    "all-on": [CHART / "ci" / "all-on-values.yaml"],
    "external": [CHART / "ci" / "external-values.yaml"],
    "strimzi-example": [CHART / "examples" / "strimzi-values.yaml"],
    "cloudnativepg-example": [CHART / "examples" / "cloudnativepg-values.yaml"],
}
PLATFORM = {
    "timer_service",
    "deadletter_service",
    "audit_projector",
    "key_service",
    "rollout_service",
    "gateway",
}
"""Never scaled to zero (the issue's list, not the chart's)."""
AGENTS = {"invoice_agent", "budget_agent", "payment_agent", "report_agent", "source_fetcher"}
# Environment variables that carry a secret: they must come from a Secret (secretKeyRef).
SECRET_ENV = re.compile(
    r"^CHORUS_(API_KEYS|.*API_KEY|.*SECRETS?|.*PASSWORD.*|MASTER_KEYS|SUBJECT_KEY|LINK_KEY|SESSION_KEY"
    r"|DATABASE_URL.*|DATABASE_ADMIN_URL|TIER_WEBHOOKS|KAFKA_SASL_PASSWORD)$"
)
# A DSN composed in the pod from a secret-backed variable: postgresql://role:$(VAR)@host/db.
COMPOSED_DSN = re.compile(r"^postgresql://[^:@/]+:\$\(([A-Z0-9_]+)\)@")
Docs = list[dict[str, Any]]


def ensure_helm() -> str:
    """helm's path, after `deploy/local/helm.sh ensure` built it (and npm-installed the validator)."""
    assert shutil.which("node"), "no node: the chart validator runs on Node.js (Debian's nodejs)"
    ensured = subprocess.run(
        [str(HELM_SH), "ensure"], capture_output=True, text=True, timeout=1800, check=False
    )
    assert ensured.returncode == 0, f"deploy/local/helm.sh ensure failed:\n{ensured.stderr}"
    path = subprocess.run([str(HELM_SH), "path"], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(path).is_file(), f"no helm at {path}"
    return path


def values_args(files: list[Path], sets: tuple[str, ...] = ()) -> list[str]:
    return [*(a for f in files for a in ("-f", str(f))), *(a for s in sets for a in ("--set", s))]


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=300, check=False)


def template(helm: str, files: list[Path], *sets: str, chart: Path = CHART) -> str:
    done = run_helm(helm, "template", RELEASE, str(chart), "--namespace", "chorus", *values_args(files, sets))
    assert done.returncode == 0, done.stderr
    return done.stdout


def parse(text: str) -> Docs:
    return [d for d in yaml.safe_load_all(text) if d]


def validate(text: str, tmp_path: Path) -> dict[str, Any]:
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(text)
    done = subprocess.run(
        ["node", str(VALIDATOR), "--json", str(rendered)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


# -- checks of rendered objects (each returns what is wrong) ----------------------------------


def of_kind(docs: Docs, kind: str) -> Docs:
    return [d for d in docs if d.get("kind") == kind]


def service_of(deployment: dict[str, Any]) -> str:
    """The registry name of the service a Deployment runs (`python -m <its package>`)."""
    command: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-m"], command
    name = command[2].rpartition(".")[2]
    assert command[2] == service_module(name), command
    return name


def security_problems(where: str, pod: dict[str, Any]) -> list[str]:
    problems = []
    pod_ctx = pod.get("securityContext") or {}
    for container in pod["containers"]:
        ctx = {**pod_ctx, **(container.get("securityContext") or {})}
        name = f"{where}/{container['name']}"
        if ctx.get("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if ctx.get("runAsUser") != 10001:
            problems.append(f"{name}: runAsUser is not the image's user 10001")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if ctx.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: readOnlyRootFilesystem is not true")
        if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
            problems.append(f"{name}: capabilities are not all dropped")
        if (ctx.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problems.append(f"{name}: seccompProfile is not RuntimeDefault")
        if ctx.get("privileged"):
            problems.append(f"{name}: privileged")
    return problems


def workload_problems(docs: Docs) -> list[str]:
    """Probes, resources and the security context of every Deployment (and the Job's pod)."""
    problems = []
    for dep in of_kind(docs, "Deployment"):
        where = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        for container in pod["containers"]:
            name = f"{where}/{container['name']}"
            for probe, path in (("readinessProbe", "/health/ready"), ("livenessProbe", "/health/live")):
                get = (container.get(probe) or {}).get("httpGet") or {}
                if get.get("path") != path or not get.get("port"):
                    problems.append(f"{name}: no {probe} on GET {path}")
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                for what in ("cpu", "memory"):
                    if what not in (resources.get(part) or {}):
                        problems.append(f"{name}: no {part}.{what}")
        problems += security_problems(where, pod)
    for job in of_kind(docs, "Job"):
        problems += security_problems(job["metadata"]["name"], job["spec"]["template"]["spec"])
    return problems


def pdb_problems(docs: Docs) -> list[str]:
    selectors = [p["spec"]["selector"].get("matchLabels") for p in of_kind(docs, "PodDisruptionBudget")]
    return [
        f"{dep['metadata']['name']}: no PodDisruptionBudget selects its pods"
        for dep in of_kind(docs, "Deployment")
        if dep["spec"]["selector"]["matchLabels"] not in selectors
    ]


def demo_secret_values() -> list[str]:
    """Every published demo secret of the code: none may ever appear in a rendered object."""
    return sorted(
        {
            *DEMO_KEYS,
            DEMO_KEY_SERVICE_CLIENT.split("{", 1)[0],  # every service's demo credential
            DEMO_WEBHOOK_SECRET,
            DEMO_PAYMENT_API_KEY,
            *DEMO_MASTER_KEYS.values(),
            DEMO_SUBJECT_KEY,
            DEMO_LINK_KEY,
            DEMO_SESSION_KEY,
            LOCAL_DATABASE_URL,
            f":{DEMO_DATABASE_PASSWORD}@",
        }
    )


def containers(docs: Docs) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc.get("kind") in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                yield f"{doc['kind']} {doc['metadata']['name']}/{container['name']}", container


def secret_problems(docs: Docs, text: str) -> list[str]:
    problems = [f"{s['metadata']['name']}: a Secret is rendered" for s in of_kind(docs, "Secret")]
    problems += [f"a demo secret is rendered: {v!r}" for v in demo_secret_values() if v in text]
    for where, container in containers(docs):
        env = {e["name"]: e for e in container.get("env") or []}
        from_secret = {n for n, e in env.items() if "secretKeyRef" in (e.get("valueFrom") or {})}
        for name, entry in env.items():
            if not SECRET_ENV.match(name) or name in from_secret:
                continue
            composed = COMPOSED_DSN.match(str(entry.get("value", "")))
            if composed and composed.group(1) in from_secret:
                continue  # a DSN whose password is another variable's, from a Secret
            problems.append(f"{where}: {name} is not taken from a Secret")
    return problems


def group_topics(registry: Registry, service: str) -> set[str]:
    """The physical topics whose files list ``service`` (or, for a runtime service, the
    runtime every service runs) as a consumer."""
    kind = registry.principals.services[service].kind
    readers = {service, RUNTIME_PRODUCER} if kind == "runtime" else {service}
    return {p for t in registry.topics.values() if readers & set(t.consumers) for p in t.physical_topics()}


def keda_problems(docs: Docs, registry: Registry) -> list[str]:
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    problems = []
    for scaled in of_kind(docs, "ScaledObject"):
        name = scaled["metadata"]["name"]
        spec = scaled["spec"]
        target = deployments.get(spec["scaleTargetRef"]["name"])
        if target is None:
            problems.append(f"{name}: scales no Deployment of the chart")
            continue
        service = service_of(target)
        if service in PLATFORM and spec.get("minReplicaCount", 0) < 1:
            problems.append(f"{name}: platform service {service} may be scaled to zero")
        if service not in registry.principals.services:
            problems.append(f"{name}: {service} has no consumer group")
            continue
        readable = group_topics(registry, service)
        topics = set()
        for trigger in spec["triggers"]:
            meta = trigger["metadata"]
            topics.add(meta["topic"])
            if trigger["type"] != "kafka" or meta["consumerGroup"] != service:
                problems.append(f"{name}: a trigger not on {service}'s consumer group: {trigger}")
            if meta["topic"] not in readable:
                problems.append(f"{name}: {service} does not read {meta['topic']}")
        consumed = {p for n in _own(registry, service) for p in registry.topics[n].physical_topics()}
        if consumed - topics:
            problems.append(f"{name}: no trigger on {sorted(consumed - topics)}, which {service} consumes")
        partitions = max(
            (spec_.partitions for t in topics if (spec_ := registry.topic_of_physical(t)) is not None),
            default=0,
        )
        if spec["maxReplicaCount"] > partitions:
            problems.append(
                f"{name}: maxReplicaCount {spec['maxReplicaCount']} > {partitions} partitions of its topics"
            )
    for dep in deployments.values():
        if service_of(dep) in PLATFORM and "replicas" in dep["spec"] and dep["spec"]["replicas"] < 1:
            problems.append(f"{dep['metadata']['name']}: a platform service without a replica")
    return problems


def _own(registry: Registry, service: str) -> list[str]:
    """The topics whose files name ``service`` itself as a consumer."""
    return [name for name, t in registry.topics.items() if service in t.consumers]


INVARIANTS: dict[str, Callable[[Docs, str, Registry], list[str]]] = {
    "workloads": lambda docs, text, reg: workload_problems(docs),
    "pdbs": lambda docs, text, reg: pdb_problems(docs),
    "secrets": lambda docs, text, reg: secret_problems(docs, text),
    "keda": lambda docs, text, reg: keda_problems(docs, reg),
}
