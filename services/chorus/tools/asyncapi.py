"""The registry as an AsyncAPI 3.0 document (``schemas/asyncapi.yaml``, ``make docs``).

Generated, never edited: the topic yamls and JSON Schemas under ``schemas/`` are the
source, and a contract test fails when the committed document is stale.

Mapping:

- one **channel** per topic yaml; ``address`` is the topic name, the Kafka channel
  binding carries partitions, ``retention.ms`` and ``cleanup.policy``; a topic with
  priority lanes names its three physical topics in the description and in
  ``x-physical-topics``;
- one **message** per event type and version, keyed by the model's snake_case title
  (``timer_schedule_v1``); its payload is ``allOf`` the envelope and the envelope
  with ``payload`` replaced by the event's schema, its Kafka key is the field the
  topic yaml names (``workflow_id``), and the registry's examples come along;
- one **send** operation per producer and one **receive** per consumer of each channel
  (``chorus-runtime`` stands for the runtime inside every service).

JSON Schemas are inlined under ``components.schemas``; their ``$defs`` become sibling
components (``timer_schedule_v1.FireTarget``) so every ``$ref`` resolves inside this
document, and ``$id``/``$schema`` are dropped because an ``$id`` would rebase those
refs for a JSON Schema validator.
"""

from __future__ import annotations

from typing import Any

import yaml

from chorus.contracts.registry import RUNTIME_PRODUCER, Registry, TopicSpec

ASYNCAPI_VERSION = "3.0.0"
DOCUMENT_FILE = "asyncapi.yaml"
# The version of the registry as a whole (info.version). Bump the major when a topic,
# event type or version is removed; versions of single events live in their messages.
API_VERSION = "1.0.0"
KAFKA_BINDING_VERSION = "0.5.0"
ENVELOPE_COMPONENT = "envelope_v1"
HEADER = (
    "# Generated from schemas/ by `make docs` (chorus schemas asyncapi); do not edit.\n"
    "# The topic yamls and JSON Schemas beside this file are the source.\n"
)

DESCRIPTION = """\
Every topic, event type and version of Chorus, as declared in the event registry
(`schemas/topics/*.yaml`, `schemas/events/*.schema.json`).

Each Kafka record is a JSON envelope (envelope v1) whose `payload` follows the
schema of its `event_type` at its `schema_version`. Consumers read older versions
through upcasters and refuse newer ones, so a new version rolls out in the order
its compatibility mode gives (`chorus schemas check`).

`chorus-runtime` is not a deployable service: it stands for the runtime inside
every service, which sends and receives platform events (timers, retries, dead
letters, reviews) on the service's behalf.
"""


def message_id(event_type: str, version: int) -> str:
    """The component key of a message: the model's title, ``timer_schedule_v1``."""
    return f"{event_type.replace('.', '_')}_v{version}"


def operation_id(service: str, action: str, topic: str) -> str:
    return f"{service}.{action}.{topic}"


def build_document(registry: Registry) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``registry`` as plain data (deterministic)."""
    schemas: dict[str, Any] = {}
    schemas.update(_components(ENVELOPE_COMPONENT, registry.envelope_schema))
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}

    for topic in sorted(registry.topics):
        spec = registry.topics[topic]
        channel_messages: dict[str, Any] = {}
        for event in spec.events:
            for version in sorted(event.versions):
                mid = message_id(event.type, version)
                schema = registry.schemas.get((event.type, version))
                if schema is None:
                    raise ValueError(
                        f"{topic}.yaml lists {event.type} v{version} but"
                        f" events/{event.type}.v{version}.schema.json is missing"
                    )
                schemas.update(_components(mid, schema))
                messages[mid] = _message(registry, spec, event.type, version, event.compatibility)
                channel_messages[mid] = {"$ref": f"#/components/messages/{mid}"}
        channels[topic] = _channel(spec, channel_messages)
        refs = [{"$ref": f"#/channels/{_escape(topic)}/messages/{mid}"} for mid in channel_messages]
        for action, services in (("send", spec.producers), ("receive", spec.consumers)):
            for service in services:
                operations[operation_id(service, action, topic)] = _operation(service, action, topic, refs)

    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "Chorus event registry",
            "version": API_VERSION,
            "description": DESCRIPTION,
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:9092",
                "protocol": "kafka",
                "description": (
                    "The broker `make up` starts on this machine (deploy/local/kafka.sh);"
                    " services find theirs in CHORUS_KAFKA_BOOTSTRAP."
                ),
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas,
            "messages": messages,
            "correlationIds": {
                "correlation_id": {
                    "description": "Shared by every event of one piece of work, across services.",
                    "location": "$message.payload#/correlation_id",
                }
            },
        },
    }


class _DocumentDumper(yaml.SafeDumper):
    """Plain YAML for people: no anchors for repeated lists, multi-line text as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_DocumentDumper.add_representer(str, _represent_str)


def render(registry: Registry) -> str:
    """The document as the YAML text committed in ``schemas/asyncapi.yaml``."""
    body = yaml.dump(
        build_document(registry),
        Dumper=_DocumentDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return HEADER + body


def _channel(spec: TopicSpec, messages: dict[str, Any]) -> dict[str, Any]:
    description = spec.description.strip()
    if spec.lanes:
        high, normal, low = spec.physical_topics()
        description += (
            f"\n\nPriority lanes: records go to `{high}`, `{normal}` or `{low}` by the"
            " envelope's `priority` (high, normal, low); all three have the settings below."
        )
    cleanup = spec.cleanup_policy.split(",")
    channel: dict[str, Any] = {
        "address": spec.topic,
        "title": spec.topic,
        "description": description,
        "messages": messages,
        "bindings": {
            "kafka": {
                "partitions": spec.partitions,
                "topicConfiguration": {
                    "cleanup.policy": cleanup,
                    "retention.ms": spec.retention_ms,
                },
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
        "x-owner": spec.owner,
        "x-message-key": spec.message_key,
        "x-physical-topics": spec.physical_topics(),
    }
    if spec.external:
        channel["x-external"] = True
    return channel


def _message(
    registry: Registry, spec: TopicSpec, event_type: str, version: int, compatibility: str
) -> dict[str, Any]:
    mid = message_id(event_type, version)
    schema = registry.schemas[(event_type, version)]
    message: dict[str, Any] = {
        "name": event_type,
        "title": f"{event_type} v{version}",
        "summary": _first_line(schema.get("description", "")) or f"{event_type} v{version}",
        "contentType": "application/json",
        "correlationId": {"$ref": "#/components/correlationIds/correlation_id"},
        "payload": {
            "allOf": [
                {"$ref": f"#/components/schemas/{ENVELOPE_COMPONENT}"},
                {
                    "type": "object",
                    "required": ["event_type", "schema_version", "payload"],
                    "properties": {
                        "event_type": {"const": event_type},
                        "schema_version": {"const": version},
                        "payload": {"$ref": f"#/components/schemas/{mid}"},
                    },
                },
            ]
        },
        "bindings": {
            "kafka": {
                "key": {
                    "type": "string",
                    "description": (
                        f"the envelope's {spec.message_key}: records with one key stay in"
                        " one partition, in order"
                    ),
                },
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
        "x-event-type": event_type,
        "x-version": version,
        "x-compatibility": compatibility,
        "x-schema-file": f"events/{event_type}.v{version}.schema.json",
    }
    examples = registry.examples.get((event_type, version), [])
    if examples:
        message["examples"] = [{"name": example.path.stem, "payload": example.body} for example in examples]
    return message


def _operation(service: str, action: str, topic: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    verb = "sends to" if action == "send" else "receives from"
    operation: dict[str, Any] = {
        "action": action,
        "channel": {"$ref": f"#/channels/{_escape(topic)}"},
        "title": f"{service} {verb} {topic}",
        "messages": messages,
        "x-service": service,
    }
    if service == RUNTIME_PRODUCER:
        operation["description"] = f"The runtime inside every service {verb} {topic} on the service's behalf."
    return operation


def _components(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A schema and its ``$defs`` as components, with refs rewritten to point at them."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                    target, _, rest = value.removeprefix("#/$defs/").partition("/")
                    out[key] = f"#/components/schemas/{name}.{target}" + (f"/{rest}" if rest else "")
                else:
                    out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    body = {k: v for k, v in schema.items() if k not in ("$schema", "$id", "$defs")}
    components = {name: rewrite(body)}
    for def_name in sorted(defs):
        components[f"{name}.{def_name}"] = rewrite(defs[def_name])
    return components


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def _escape(token: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")
