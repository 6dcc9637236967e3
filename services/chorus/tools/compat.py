"""The compatibility gate: the registry in the working tree against the registry at a git ref.

``chorus schemas check --against <ref>`` reads ``schemas/`` twice, from the working
tree (uncommitted changes included) and from ``<ref>`` (``git ls-tree`` and
``git cat-file``; nothing in the work tree or the index changes), and classifies every
difference of every (event type, version) present in both.

Directions (Confluent's terms, reader/writer):

- **backward**: consumers on the new schema read data written with the old one;
  a change that makes the schema accept *less* breaks it (a new required field,
  a narrowed enum, a tightened ``maxLength``...).
- **forward**: consumers on the old schema read data written with the new one;
  a change that makes the schema accept *more* breaks it (a removed required field,
  a widened enum, a loosened constraint...).
- **full** needs both; **none** accepts anything.

Unlike Confluent's JSON Schema rules, adding or removing an *optional* property of
an open object is safe: Chorus models ignore unknown fields (``extra="ignore"``),
so a reader neither trips over a field it does not know nor misses one it never
required (the "optional-friendly" policy). Closing an object
(``additionalProperties: false``) brings Confluent's stricter rules back for it.

A changed existing version is judged by the mode its topic yaml declares in the
working tree. A new version ``vN+1`` may break anything relative to ``vN``: readers
pick versions by number and chain upcasters, so the gate only prints the order in
which to roll it out. The envelope (``envelope.v1.schema.json``) is checked too,
always under ``full``: every service writes and reads it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

import yaml

from chorus.contracts.base import PERSONAL_MARK, SEALED_PATTERN
from chorus.contracts.registry import Compatibility, TopicEvent, parse_schema_filename

Direction = Literal["backward", "forward"]
BACKWARD: frozenset[Direction] = frozenset({"backward"})
FORWARD: frozenset[Direction] = frozenset({"forward"})
BOTH: frozenset[Direction] = BACKWARD | FORWARD
SAFE: frozenset[Direction] = frozenset()

REQUIRED_DIRECTIONS: dict[Compatibility, frozenset[Direction]] = {
    "backward": BACKWARD,
    "forward": FORWARD,
    "full": BOTH,
    "none": SAFE,
}
WHO_BREAKS: dict[Direction, str] = {
    "backward": "new consumers cannot read old data",
    "forward": "old consumers cannot read new data",
}
ROLLOUT_ORDER: dict[Compatibility, str] = {
    "backward": "roll out consumers first, then producers",
    "forward": "roll out producers first, then consumers",
    "full": "roll out in any order",
    "none": "no compatibility promised: deploy its producers and consumers together",
}
DEFAULT_COMPATIBILITY = cast(Compatibility, TopicEvent.model_fields["compatibility"].default)
ENVELOPE = "envelope"
ENVELOPE_FILE = "envelope.v1.schema.json"


class GitError(Exception):
    """git is missing, the directory is not a repository, or git failed."""


class RegistryReadError(Exception):
    """A registry file (at the ref or in the working tree) cannot be parsed."""


# -- the registry as files -------------------------------------------------------------


@dataclass(frozen=True)
class EventDecl:
    """One event type as a topic yaml declares it (read leniently: old refs may predate fields)."""

    event_type: str
    topic: str
    versions: tuple[int, ...]
    compatibility: Compatibility
    producers: tuple[str, ...]
    consumers: tuple[str, ...]


@dataclass
class Snapshot:
    """The registry at one point: declarations from ``topics/``, schemas from ``events/``."""

    label: str
    events: dict[str, EventDecl] = field(default_factory=dict)
    schemas: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    envelope: dict[str, Any] | None = None
    states: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """Each service's checkpoint schema per state version, from ``state/``."""

    def all_consumers(self) -> tuple[str, ...]:
        return tuple(sorted({c for decl in self.events.values() for c in decl.consumers}))


def registry_files(root: Path) -> dict[str, str]:
    """The files of the registry in the working tree, keyed by path relative to ``root``."""
    files: dict[str, str] = {}
    for pattern in ("topics/*.yaml", "events/*.schema.json", "state/*.schema.json", ENVELOPE_FILE):
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                files[path.relative_to(root).as_posix()] = path.read_text()
    return files


def parse_snapshot(files: Mapping[str, str], label: str) -> Snapshot:
    """Build a snapshot from registry files; raises RegistryReadError naming the bad file."""
    snap = Snapshot(label)
    for rel, text in sorted(files.items()):
        where = f"{rel} ({label})"
        if rel.startswith("topics/") and rel.endswith(".yaml"):
            for decl in _parse_topic(text, Path(rel).stem, where):
                if decl.event_type in snap.events:
                    raise RegistryReadError(f"{where}: {decl.event_type} is declared twice")
                snap.events[decl.event_type] = decl
        elif rel.startswith("events/") and rel.endswith(".schema.json"):
            try:
                key = parse_schema_filename(Path(rel).name)
                snap.schemas[key] = _parse_json(text, where)
            except ValueError as exc:
                raise RegistryReadError(f"{where}: {exc}") from None
        elif rel == ENVELOPE_FILE:
            snap.envelope = _parse_json(text, where)
        elif found := STATE_FILE.fullmatch(rel):
            snap.states[(found.group(1), int(found.group(2)))] = _parse_json(text, where)
    return snap


def _parse_json(text: str, where: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise RegistryReadError(f"{where}: not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RegistryReadError(f"{where}: a schema must be a JSON object")
    return body


def _parse_topic(text: str, stem: str, where: str) -> list[EventDecl]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryReadError(f"{where}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RegistryReadError(f"{where}: a topic file must be a mapping")
    topic = str(data.get("topic") or stem)
    producers = tuple(str(p) for p in data.get("producers") or [])
    consumers = tuple(str(c) for c in data.get("consumers") or [])
    decls: list[EventDecl] = []
    for entry in data.get("events") or []:
        if not isinstance(entry, dict) or "type" not in entry:
            raise RegistryReadError(f"{where}: every entry of events needs a type")
        mode = entry.get("compatibility", DEFAULT_COMPATIBILITY)
        if mode not in get_args(Compatibility):
            raise RegistryReadError(f"{where}: unknown compatibility {mode!r} for {entry['type']}")
        decls.append(
            EventDecl(
                event_type=str(entry["type"]),
                topic=topic,
                versions=tuple(int(v) for v in entry.get("versions") or []),
                compatibility=cast(Compatibility, mode),
                producers=producers,
                consumers=consumers,
            )
        )
    return decls


# -- reading a git ref -----------------------------------------------------------------


@dataclass(frozen=True)
class GitRepo:
    """The git repository holding a registry directory; reads refs without touching the tree."""

    toplevel: Path
    prefix: str  # path of the registry directory from the top level, with a trailing "/"

    @classmethod
    def of(cls, schemas_dir: Path) -> GitRepo:
        """The repository whose work tree contains ``schemas_dir`` (its parent is the root)."""
        root = schemas_dir.resolve().parent
        if not root.is_dir():
            raise GitError(f"{root} does not exist")
        out = _git(root, "rev-parse", "--show-toplevel", "--show-prefix")
        lines = out.splitlines()
        toplevel = Path(lines[0])
        prefix = lines[1] if len(lines) > 1 else ""
        return cls(toplevel, f"{prefix}{schemas_dir.resolve().name}/")

    def commit_of(self, ref: str) -> str | None:
        """The commit ``ref`` names, or None when it does not exist in this clone."""
        proc = _run_git(self.toplevel, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if proc.returncode != 0:
            return None
        return proc.stdout.strip() or None

    def is_ancestor(self, commit: str, of: str) -> bool:
        """True when ``commit`` is ``of`` or one of its ancestors."""
        return _run_git(self.toplevel, "merge-base", "--is-ancestor", commit, of).returncode == 0

    def first_commit_after(self, commit: str) -> str | None:
        """The commit that follows ``commit`` on the way to HEAD (None when HEAD is it)."""
        out = _git(self.toplevel, "rev-list", "--ancestry-path", "--reverse", f"{commit}..HEAD")
        return out.split("\n", 1)[0].strip() or None

    def is_shallow(self) -> bool:
        return _git(self.toplevel, "rev-parse", "--is-shallow-repository").strip() == "true"

    def registry_files(self, commit: str) -> dict[str, str]:
        """The registry files at ``commit``, keyed like :func:`registry_files`."""
        listing = _git(self.toplevel, "ls-tree", "-r", "-z", "--name-only", commit, "--", self.prefix)
        wanted: list[str] = []
        for path in listing.split("\0"):
            rel = path.removeprefix(self.prefix)
            if not path or rel == path:
                continue
            is_topic = rel.startswith("topics/") and rel.endswith(".yaml") and rel.count("/") == 1
            is_schema = rel.startswith("events/") and rel.endswith(".schema.json") and rel.count("/") == 1
            if is_topic or is_schema or rel == ENVELOPE_FILE or STATE_FILE.fullmatch(rel):
                wanted.append(rel)
        blobs = self._cat(commit, [self.prefix + rel for rel in wanted])
        return dict(zip(wanted, blobs, strict=True))

    def _cat(self, commit: str, paths: list[str]) -> list[str]:
        # One `git cat-file --batch` for every file: a process per file would make the
        # gate slow on a large registry.
        if not paths:
            return []
        request = "".join(f"{commit}:{path}\n" for path in paths).encode()
        proc = subprocess.run(
            ["git", "cat-file", "--batch"],
            cwd=self.toplevel,
            input=request,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            raise GitError(f"git cat-file failed: {proc.stderr.decode(errors='replace').strip()}")
        out, pos, texts = proc.stdout, 0, []
        for path in paths:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode()
            if header.endswith(" missing"):
                raise GitError(f"{path} is missing at {commit}")
            size = int(header.rsplit(" ", 1)[1])
            texts.append(out[end + 1 : end + 1 + size].decode())
            pos = end + 1 + size + 1  # the blob is followed by a newline
        return texts


def _run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed (the gate reads the registry at a git ref)") from None


def _git(cwd: Path, *args: str) -> str:
    proc = _run_git(cwd, *args)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


# -- schema differences ----------------------------------------------------------------


@dataclass(frozen=True)
class SchemaChange:
    """One difference between two schemas, at a JSON pointer into the data."""

    pointer: str
    what: str
    breaks: frozenset[Direction]


LOWER_BOUNDS = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
UPPER_BOUNDS = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
EXACT = ("pattern", "format", "multipleOf", "contentEncoding", "contentMediaType")
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$id",
        "$schema",
        "$defs",
        "definitions",
        "discriminator",
    }
)
MODELLED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "uniqueItems",
        *LOWER_BOUNDS,
        *UPPER_BOUNDS,
        *EXACT,
    }
)


def diff_schemas(old: Any, new: Any, prefix: str = "", *, personal_marks: bool = True) -> list[SchemaChange]:
    """Every difference between two JSON Schemas, classified by the direction it breaks.

    Walks properties, array items, ``anyOf``/``oneOf`` branches, ``allOf`` and local
    ``$ref``/``$defs``; a change inside a referenced definition is reported at the
    pointer of the field that uses it (``/payload/lines/items/amount_cents``), once
    per use. Pure: no I/O.
    """
    differ = _Differ(old, new, personal_marks=personal_marks)
    differ.walk(old, new, prefix, frozenset())
    return differ.changes


Schema = dict[str, Any]


def _without_sealed(node: Any) -> Any:
    """A personal field's schema without the sealed form every personal field accepts
    (chorus.contracts.base.Personal): that alternative comes with the mark, which is
    compared on its own, and every consumer reads it through the runtime."""
    if not (isinstance(node, dict) and node.get(PERSONAL_MARK)):
        return node
    branches = node.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2):
        return node
    plain, sealed = branches
    if not (isinstance(sealed, dict) and sealed.get("pattern") == SEALED_PATTERN and isinstance(plain, dict)):
        return node
    return {**{k: v for k, v in node.items() if k != "anyOf"}, **plain}


RefPair = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass
class _Branch:
    schema: Schema
    name: str | None  # the definition it came from, or its title: pairs union variants
    refs: tuple[str, ...] = ()  # refs followed to reach it (recursion guard)


class _Differ:
    def __init__(self, old_root: Any, new_root: Any, *, personal_marks: bool = True) -> None:
        self.old_root = old_root
        self.new_root = new_root
        self.personal_marks = personal_marks
        """Whether a change of the personal-data mark counts (not while it is introduced)."""
        self.changes: list[SchemaChange] = []

    def add(self, pointer: str, what: str, breaks: frozenset[Direction]) -> None:
        self.changes.append(SchemaChange(pointer or "/", what, breaks))

    # The walk: resolve, compare the accepted types, pair union branches, then bodies.
    def walk(self, old: Any, new: Any, ptr: str, active: frozenset[RefPair]) -> None:
        self._personal(old, new, ptr)  # before resolving: the mark sits beside a $ref
        old, new = _without_sealed(old), _without_sealed(new)
        o, o_refs = _resolve(old, self.old_root)
        n, n_refs = _resolve(new, self.new_root)
        pair = (o_refs, n_refs)
        if o_refs or n_refs:
            if pair in active:
                return  # a recursive definition: this pair is being compared further up
            active = active | {pair}
        o_comb, n_comb = _combinator(o), _combinator(n)
        if o_comb and n_comb and o_comb != n_comb:
            self.add(
                ptr,
                f"{o_comb} became {n_comb}",
                BACKWARD if n_comb == "oneOf" else FORWARD,
            )
        ob = self._branches(o, self.old_root, o_refs)
        nb = self._branches(n, self.new_root, n_refs)
        o_types, n_types = _union_types(ob), _union_types(nb)
        if not self._types(o_types, n_types, ptr):
            return  # nothing in common: the detail below would only repeat "retyped"
        pairs, gone, added = _pair_branches(ob, nb)
        for old_branch, new_branch in pairs:
            branch_pair = (old_branch.refs, new_branch.refs)
            if branch_pair == ((), ()):
                self.body(old_branch.schema, new_branch.schema, ptr, active)
            elif branch_pair not in active:  # else a recursive union already being compared
                self.body(old_branch.schema, new_branch.schema, ptr, active | {branch_pair})
        # Variants whose type is still accepted overall (a type change is reported above).
        for branch in gone:
            if _covers(n_types, _types(branch.schema)):
                self.add(ptr, f"no longer accepts {_describe(branch)}", BACKWARD)
        for branch in added:
            if _covers(o_types, _types(branch.schema)):
                self.add(ptr, f"now also accepts {_describe(branch)}", FORWARD)

    def _branches(self, schema: Schema, root: Any, refs: tuple[str, ...]) -> list[_Branch]:
        comb = _combinator(schema)
        if comb is None:
            name = refs[-1].rsplit("/", 1)[-1] if refs else schema.get("title")
            return [_Branch(schema, name if isinstance(name, str) else None)]
        branches = []
        for sub in schema[comb]:
            resolved, sub_refs = _resolve(sub, root)
            name = sub_refs[-1].rsplit("/", 1)[-1] if sub_refs else resolved.get("title")
            branches.append(_Branch(resolved, name if isinstance(name, str) else None, sub_refs))
        return branches

    def _types(self, o: frozenset[str] | None, n: frozenset[str] | None, ptr: str) -> bool:
        """Report a change of accepted JSON types; False when old and new share none."""
        breaks = (SAFE if _covers(n, o) else BACKWARD) | (SAFE if _covers(o, n) else FORWARD)
        if breaks:
            if o is not None and n is not None and n == o | {"null"}:
                what = f"now nullable (was {_fmt_types(o)})"
            elif o is not None and n is not None and o == n | {"null"}:
                what = f"no longer nullable (is {_fmt_types(n)})"
            elif breaks == BOTH:
                what = f"type changed from {_fmt_types(o)} to {_fmt_types(n)}"
            elif breaks == BACKWARD:
                what = f"type narrowed from {_fmt_types(o)} to {_fmt_types(n)}"
            else:
                what = f"type widened from {_fmt_types(o)} to {_fmt_types(n)}"
            self.add(ptr, what, breaks)
        return o is None or n is None or _overlap(o, n)

    def _personal(self, old: Any, new: Any, ptr: str) -> None:
        """Personal data marked or unmarked: whatever encrypts, decrypts, minimises or erases
        by the mark must change with it, on both sides."""
        if not (self.personal_marks and isinstance(old, dict) and isinstance(new, dict)):
            return
        was, now = bool(old.get(PERSONAL_MARK)), bool(new.get(PERSONAL_MARK))
        if was != now:
            self.add(ptr, "now marked personal data" if now else "no longer marked personal data", BOTH)

    def body(self, o: Schema, n: Schema, ptr: str, active: frozenset[RefPair]) -> None:
        if o.get("$ref") != n.get("$ref"):
            # Only refs that could not be followed are left: what they name is unknown.
            self.add(ptr, f"$ref changed from {_short(o.get('$ref'))} to {_short(n.get('$ref'))}", BOTH)
        self._enum(o, n, ptr)
        self._bounds(o, n, ptr)
        self._exact(o, n, ptr)
        if _is_object(o) or _is_object(n):
            self._object(o, n, ptr, active)
        if any(k in o or k in n for k in ("items", "prefixItems")):
            self._array(o, n, ptr, active)
        for key in sorted((o.keys() | n.keys()) - MODELLED - ANNOTATIONS):
            if key.startswith("x-") or _canon(o.get(key)) == _canon(n.get(key)):
                continue
            # A keyword the gate does not model: any change may break either side.
            self.add(ptr, f"{key} changed", BOTH)
        if "default" in o and "default" in n and _canon(o["default"]) != _canon(n["default"]):
            self.add(ptr, f"default changed from {_short(o['default'])} to {_short(n['default'])}", SAFE)

    def _object(self, o: Schema, n: Schema, ptr: str, active: frozenset[RefPair]) -> None:
        po: dict[str, Any] = o.get("properties") or {}
        pn: dict[str, Any] = n.get("properties") or {}
        ro, rn = set(o.get("required") or []), set(n.get("required") or [])
        closed_o, closed_n = _closed(o), _closed(n)
        for name in po:
            if name in pn:
                continue
            # An open reader ignores a field it no longer declares; a closed one rejects it.
            if name in ro:
                self.add(
                    _child(ptr, name),
                    "required field removed",
                    FORWARD | (BACKWARD if closed_n else SAFE),
                )
            else:
                self.add(_child(ptr, name), "optional field removed", BACKWARD if closed_n else SAFE)
        for name, new_prop in pn.items():
            here = _child(ptr, name)
            if name not in po:
                if name in rn:
                    self.add(here, "required field added", BACKWARD | (FORWARD if closed_o else SAFE))
                else:
                    self.add(here, "optional field added", FORWARD if closed_o else SAFE)
                continue
            if name in rn and name not in ro:
                self.add(here, "field made required", BACKWARD)
            elif name in ro and name not in rn:
                self.add(here, "field made optional", FORWARD)
            self.walk(po[name], new_prop, here, active)
        for name in sorted((rn - ro) - pn.keys()):
            self.add(_child(ptr, name), "required field added", BACKWARD)
        for name in sorted((ro - rn) - po.keys()):
            self.add(_child(ptr, name), "required field removed", FORWARD)
        if closed_o != closed_n:
            if closed_n:
                self.add(ptr, "additional properties no longer allowed", BACKWARD)
            else:
                self.add(ptr, "additional properties now allowed", FORWARD)
        else:
            ao, an = o.get("additionalProperties"), n.get("additionalProperties")
            if isinstance(ao, dict) or isinstance(an, dict):
                self.walk(
                    ao if isinstance(ao, dict) else {},
                    an if isinstance(an, dict) else {},
                    ptr + "/additionalProperties",
                    active,
                )

    def _array(self, o: Schema, n: Schema, ptr: str, active: frozenset[RefPair]) -> None:
        oi, ni = o.get("items"), n.get("items")
        if oi is not None or ni is not None:
            self.walk({} if oi is None else oi, {} if ni is None else ni, ptr + "/items", active)
        op, np_ = o.get("prefixItems") or [], n.get("prefixItems") or []
        for i in range(max(len(op), len(np_))):
            here = f"{ptr}/prefixItems/{i}"
            if i >= len(op):
                self.add(here, "tuple item added", BOTH)
            elif i >= len(np_):
                self.add(here, "tuple item removed", BOTH)
            else:
                self.walk(op[i], np_[i], here, active)

    def _enum(self, o: Schema, n: Schema, ptr: str) -> None:
        eo, en = _enum_values(o), _enum_values(n)
        if eo is None and en is None:
            return
        if eo is None:
            self.add(ptr, f"values restricted to {_fmt_values(en or [])}", BACKWARD)
            return
        if en is None:
            self.add(ptr, f"values no longer restricted (were {_fmt_values(eo)})", FORWARD)
            return
        old_keys, new_keys = {_canon(v) for v in eo}, {_canon(v) for v in en}
        removed = [v for v in eo if _canon(v) not in new_keys]
        added = [v for v in en if _canon(v) not in old_keys]
        if removed:
            self.add(ptr, f"enum narrowed: {_fmt_values(removed)} removed", BACKWARD)
        if added:
            self.add(ptr, f"enum widened: {_fmt_values(added)} added", FORWARD)

    def _bounds(self, o: Schema, n: Schema, ptr: str) -> None:
        for key in (*LOWER_BOUNDS, *UPPER_BOUNDS):
            a, b = o.get(key), n.get(key)
            if a == b:
                continue
            lower = key in LOWER_BOUNDS
            if a is None:
                self.add(ptr, f"{key} {b} added (tightened)", BACKWARD)
            elif b is None:
                self.add(ptr, f"{key} {a} removed (loosened)", FORWARD)
            elif (b > a) == lower:
                verb = "raised" if lower else "lowered"
                self.add(ptr, f"{key} {verb} from {a} to {b} (tightened)", BACKWARD)
            else:
                verb = "lowered" if lower else "raised"
                self.add(ptr, f"{key} {verb} from {a} to {b} (loosened)", FORWARD)

    def _exact(self, o: Schema, n: Schema, ptr: str) -> None:
        for key in EXACT:
            a, b = o.get(key), n.get(key)
            if a == b:
                continue
            if a is None:
                self.add(ptr, f"{key} {_short(b)} added (tightened)", BACKWARD)
            elif b is None:
                self.add(ptr, f"{key} {_short(a)} removed (loosened)", FORWARD)
            else:
                self.add(ptr, f"{key} changed from {_short(a)} to {_short(b)}", BOTH)
        if bool(o.get("uniqueItems")) != bool(n.get("uniqueItems")):
            if n.get("uniqueItems"):
                self.add(ptr, "items must now be unique (tightened)", BACKWARD)
            else:
                self.add(ptr, "items no longer need to be unique (loosened)", FORWARD)


def _as_schema(value: Any) -> Schema:
    if value is True or value is None:
        return {}
    if value is False:
        return {"not": {}}
    return value if isinstance(value, dict) else {}


def _resolve(schema: Any, root: Any) -> tuple[Schema, tuple[str, ...]]:
    """Follow local ``$ref`` chains and merge ``allOf``; returns the refs followed."""
    current = _as_schema(schema)
    refs: list[str] = []
    while isinstance(current.get("$ref"), str) and current["$ref"].startswith("#"):
        ref = current["$ref"]
        target = _pointer_get(root, ref[1:])
        if target is None or ref in refs:
            break  # dangling or cyclic: body() compares the $ref strings themselves
        refs.append(ref)
        siblings = {k: v for k, v in current.items() if k != "$ref"}
        current = {**_as_schema(target), **siblings}
    if isinstance(current.get("allOf"), list):
        merged = {k: v for k, v in current.items() if k != "allOf"}
        for sub in current["allOf"]:
            part, sub_refs = _resolve(sub, root)
            refs.extend(sub_refs)
            _merge_into(merged, part)
        current = merged
    return current, tuple(refs)


def _merge_into(target: Schema, part: Schema) -> None:
    for key, value in part.items():
        if key == "properties":
            target["properties"] = {**target.get("properties", {}), **value}
        elif key == "required":
            target["required"] = sorted(set(target.get("required", [])) | set(value))
        else:
            target.setdefault(key, value)


def _pointer_get(root: Any, pointer: str) -> Any:
    node = root
    for raw in pointer.split("/")[1:] if pointer else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _child(ptr: str, name: str) -> str:
    return f"{ptr}/{name.replace('~', '~0').replace('/', '~1')}"


def _combinator(schema: Schema) -> str | None:
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return key
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _types(schema: Schema) -> frozenset[str] | None:
    """The JSON types a schema accepts; None means any type."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(str(t) for t in declared)
    values = _enum_values(schema)
    if values is not None:
        return frozenset(_json_type(v) for v in values)
    if _combinator(schema):
        return None  # resolved by the caller branch by branch
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        return frozenset({"object"})
    if any(k in schema for k in ("items", "prefixItems")):
        return frozenset({"array"})
    return None


def _union_types(branches: Iterable[_Branch]) -> frozenset[str] | None:
    union: set[str] = set()
    for branch in branches:
        types = _types(branch.schema)
        if types is None:
            return None
        union |= types
    return frozenset(union)


def _covers(wide: frozenset[str] | None, narrow: frozenset[str] | None) -> bool:
    """Whether a schema accepting ``wide`` accepts every value typed ``narrow``."""
    if wide is None:
        return True
    if narrow is None:
        return False
    return all(t in wide or (t == "integer" and "number" in wide) for t in narrow)


def _overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    def widen(types: frozenset[str]) -> set[str]:
        return set(types) | ({"integer"} if "number" in types else set())

    return bool(widen(a) & widen(b))


def _pair_branches(
    old: list[_Branch], new: list[_Branch]
) -> tuple[list[tuple[_Branch, _Branch]], list[_Branch], list[_Branch]]:
    """Pair the variants of two unions: (pairs, only in old, only in new).

    A lone schema on each side is always one pair, whatever its definition is called:
    renaming a model class renames its ``$defs`` entry and changes nothing on the wire.
    In a union, variants pair by definition name first, then by a shared JSON type.
    """
    if len(old) == 1 and len(new) == 1:
        return [(old[0], new[0])], [], []
    pairs: list[tuple[_Branch, _Branch]] = []
    left, right = list(old), list(new)
    for branch in list(left):
        same = next((o for o in right if branch.name and o.name == branch.name), None)
        if same is not None:
            pairs.append((branch, same))
            left.remove(branch)
            right.remove(same)
    for branch in list(left):
        types = _types(branch.schema)
        similar = next(
            (o for o in right if types is None or (t := _types(o.schema)) is None or _overlap(types, t)),
            None,
        )
        if similar is not None:
            pairs.append((branch, similar))
            left.remove(branch)
            right.remove(similar)
    return pairs, left, right


def _describe(branch: _Branch) -> str:
    kind = _fmt_types(_types(branch.schema))
    return f"{kind} {branch.name}" if branch.name else kind


def _is_object(schema: Schema) -> bool:
    types = _types(schema)
    return types is not None and "object" in types


def _closed(schema: Schema) -> bool:
    return schema.get("additionalProperties") is False or schema.get("unevaluatedProperties") is False


def _enum_values(schema: Schema) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt_types(types: frozenset[str] | None) -> str:
    return "any" if types is None else "|".join(sorted(types))


def _fmt_values(values: list[Any]) -> str:
    return ", ".join(_short(v) for v in values)


# -- the gate ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A difference of an existing (event type, version), judged under its topic's mode."""

    event_type: str
    version: int
    pointer: str
    what: str
    breaks: frozenset[Direction]
    compatibility: Compatibility
    consumers: tuple[str, ...]

    @property
    def breaking(self) -> bool:
        return bool(self.breaks & REQUIRED_DIRECTIONS[self.compatibility])

    def line(self) -> str:
        where = f"{self.event_type} v{self.version} {self.pointer}"
        if not self.breaking:
            return f"ok        {where}: {self.what}"
        why = "; ".join(WHO_BREAKS[d] for d in sorted(self.breaks & REQUIRED_DIRECTIONS[self.compatibility]))
        consumers = ", ".join(self.consumers) or "(no consumers declared)"
        return (
            f"BREAKING  {where}: {self.what} ({why}; compatibility {self.compatibility})"
            f" — breaks consumers: {consumers}"
        )


@dataclass(frozen=True)
class Rollout:
    """A version that did not exist at the ref: allowed, but deployed in a given order."""

    event_type: str
    version: int
    topic: str
    compatibility: Compatibility
    changes: tuple[SchemaChange, ...]  # relative to the previous version

    def line(self) -> str:
        previous = f"v{self.version - 1}"
        breaking = [c for c in self.changes if c.breaks & REQUIRED_DIRECTIONS[self.compatibility]]
        detail = f"{len(breaking)} breaking change(s) from {previous}, allowed in a new version"
        return (
            f"NEW       {self.event_type} v{self.version} on {self.topic} ({detail};"
            f" compatibility {self.compatibility}): {ROLLOUT_ORDER[self.compatibility]}"
        )


@dataclass
class Report:
    against: str
    findings: list[Finding] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def breaking(self) -> list[Finding]:
        return [f for f in self.findings if f.breaking]

    @property
    def ok(self) -> bool:
        return not self.breaking


def compare(old: Snapshot, new: Snapshot) -> Report:
    """Classify every difference between two registries (``old`` at the ref, ``new`` now)."""
    report = Report(against=old.label)

    def decl(event_type: str) -> EventDecl | None:
        return new.events.get(event_type) or old.events.get(event_type)

    def mode_and_consumers(event_type: str) -> tuple[Compatibility, tuple[str, ...]]:
        d = decl(event_type)
        return (d.compatibility, d.consumers) if d else (DEFAULT_COMPATIBILITY, ())

    # A registry with no personal-data mark yet is getting them for the first time: that is
    # their introduction (consumers learn of them with it), not a change to judge.
    marked = any(PERSONAL_MARK in json.dumps(schema) for schema in old.schemas.values())
    if not marked and any(PERSONAL_MARK in json.dumps(schema) for schema in new.schemas.values()):
        report.notes.append("personal-data marks introduced (from now on a change of a mark breaks)")
    for key in sorted(old.schemas.keys() & new.schemas.keys()):
        event_type, version = key
        mode, consumers = mode_and_consumers(event_type)
        for change in diff_schemas(old.schemas[key], new.schemas[key], "/payload", personal_marks=marked):
            report.findings.append(
                Finding(event_type, version, change.pointer, change.what, change.breaks, mode, consumers)
            )

    for event_type, version in sorted(old.schemas.keys() - new.schemas.keys()):
        mode, consumers = mode_and_consumers(event_type)
        if consumers:
            report.findings.append(
                Finding(
                    event_type,
                    version,
                    "/",
                    "version removed while its topic still has"
                    " consumers (remove them from the topic yaml first)",
                    BOTH,
                    mode,
                    consumers,
                )
            )
        else:
            report.notes.append(f"{event_type} v{version} removed; no consumer claims it")

    for event_type, version in sorted(new.schemas.keys() - old.schemas.keys()):
        d = new.events.get(event_type)
        mode = d.compatibility if d else DEFAULT_COMPATIBILITY
        topic = d.topic if d else "(no topic)"
        previous = (event_type, version - 1)
        if version > 1 and previous in new.schemas:
            changes = diff_schemas(new.schemas[previous], new.schemas[(event_type, version)], "/payload")
            report.rollouts.append(Rollout(event_type, version, topic, mode, tuple(changes)))
        else:
            report.notes.append(f"new event type {event_type} v{version} on {topic}")

    for event_type in sorted(old.events.keys() & new.events.keys()):
        before, after = old.events[event_type], new.events[event_type]
        if before.topic != after.topic:
            # A consumer of the old topic that does not read the new one loses the event
            # type for good; the others only need the old topic drained first.
            lost = tuple(c for c in before.consumers if c not in after.consumers)
            if lost:
                report.findings.append(
                    Finding(
                        event_type,
                        max(after.versions or before.versions or (1,)),
                        "/",
                        f"moved from topic {before.topic} to {after.topic}, which these"
                        " consumers do not read",
                        BOTH,
                        after.compatibility,
                        lost,
                    )
                )
            else:
                report.notes.append(
                    f"{event_type} moved from topic {before.topic} to {after.topic}: records"
                    f" still in {before.topic} are read by nobody once consumers move; drain"
                    " it before deploying"
                )
        if before.compatibility != after.compatibility:
            report.notes.append(
                f"{event_type}: compatibility {before.compatibility} -> {after.compatibility}"
            )

    if old.envelope is not None:
        consumers = new.all_consumers() or old.all_consumers()
        if new.envelope is None:
            report.findings.append(
                Finding(ENVELOPE, 1, "/", f"{ENVELOPE_FILE} removed", BOTH, "full", consumers)
            )
        else:
            for change in diff_schemas(old.envelope, new.envelope):
                report.findings.append(
                    Finding(ENVELOPE, 1, change.pointer, change.what, change.breaks, "full", consumers)
                )
    return report


# -- accepted breaks ----------------------------------------------------------------------

ACCEPTED_FILE = "accepted-breaks.yaml"


@dataclass(frozen=True)
class AcceptedBreak:
    """Tightenings made on purpose (``schemas/accepted-breaks.yaml``), like buf's
    ``breaking.ignore`` but scoped to one change: ``until`` is the last commit before it.
    The entry accepts exactly the tightenings the next commit after ``until`` made (or the
    working tree makes, while it is not committed), and only when the gate compares
    against ``until`` or one of its ancestors. A later tightening is never covered."""

    until: str
    reason: str

    @staticmethod
    def covers(finding: Finding) -> bool:
        # Only tightenings (new consumers may refuse old data, which is then dead-lettered
        # like any invalid record); a loosening would let old consumers choke on new data.
        return finding.breaks & REQUIRED_DIRECTIONS[finding.compatibility] == BACKWARD


def accepted_breaks(schemas_dir: Path) -> list[AcceptedBreak]:
    path = schemas_dir / ACCEPTED_FILE
    if not path.exists():
        return []
    try:
        entries = yaml.safe_load(path.read_text()) or []
        return [AcceptedBreak(str(e["until"]), str(e["reason"])) for e in entries]
    except (yaml.YAMLError, KeyError, TypeError) as exc:
        raise RegistryReadError(f"{path}: each entry needs `until` (a commit) and `reason`: {exc}") from exc


def _key(finding: Finding) -> tuple[str, int, str, str]:
    return (finding.event_type, finding.version, finding.pointer, finding.what)


def _waived(
    repo: GitRepo, schemas_dir: Path, base: str, breaking: list[Finding]
) -> tuple[list[Finding], list[AcceptedBreak]]:
    """The breaking findings an entry accepts, and the entries that accepted some."""
    waived: list[Finding] = []
    used: list[AcceptedBreak] = []
    for accepted in accepted_breaks(schemas_dir):
        until = repo.commit_of(accepted.until)
        if until is None or not repo.is_ancestor(base, until):
            continue
        after = repo.first_commit_after(until)
        made = (
            parse_snapshot(repo.registry_files(after), after)
            if after is not None
            else parse_snapshot(registry_files(schemas_dir), "working tree")
        )
        intended = {
            _key(f)
            for f in compare(parse_snapshot(repo.registry_files(until), until), made).breaking
            if accepted.covers(f)
        }
        covered = [f for f in breaking if accepted.covers(f) and _key(f) in intended and f not in waived]
        if covered:
            waived += covered
            used.append(accepted)
    return waived, used


@dataclass(frozen=True)
class Outcome:
    """What ``chorus schemas check`` prints and its exit code (0 ok, 1 breaking)."""

    lines: list[str]
    exit_code: int


STATE_FILE = re.compile(r"state/([a-z][a-z0-9_]*)\.v([1-9][0-9]*)\.schema\.json")
"""A service's checkpoint schema at one state version (written by ``make schemas``)."""


def compare_states(old: Snapshot, new: Snapshot) -> list[str]:
    """A checkpoint schema is fixed once committed: any change within a state version, even
    an added optional field, is one that a release still on that version would silently
    drop when it writes the checkpoint back. So every difference is breaking (a new state
    version is the way), and so is a removed file (checkpoints of that version exist)."""
    lines = []
    for service, version in sorted(old.states):
        key = (service, version)
        if key not in new.states:
            lines.append(f"BREAKING  state of {service} v{version}: its schema file was removed")
        elif old.states[key] != new.states[key]:
            changes = diff_schemas(old.states[key], new.states[key], "/state", personal_marks=False)
            what = "; ".join(f"{c.pointer}: {c.what}" for c in changes[:5]) or "its schema changed"
            lines.append(f"BREAKING  state of {service} v{version} changed in place: {what}")
    for service, version in sorted(new.states.keys() - old.states.keys()):
        lines.append(f"new       state of {service} v{version}")
    return lines


def check(schemas_dir: Path, against: str) -> Outcome:
    """Compare the registry in the working tree with the one at git ref ``against``.

    Read-only: never changes the work tree or the index. Raises GitError when git is
    missing or ``schemas_dir`` is not in a git work tree, RegistryReadError when a
    registry file cannot be parsed. A ref that does not exist (first commit, shallow
    clone) is not an error: the outcome says so and exits 0.
    """
    repo = GitRepo.of(schemas_dir)
    commit = repo.commit_of(against)
    if commit is None:
        why = (
            "this is a shallow clone; `git fetch --deepen=1` brings the parent"
            if repo.is_shallow()
            else "no such commit here (first commit, or a ref not fetched)"
        )
        return Outcome([f"note: {against} does not exist ({why}); nothing to compare"], 0)
    label = f"{against} ({commit[:10]})"
    old = parse_snapshot(repo.registry_files(commit), label)
    new = parse_snapshot(registry_files(schemas_dir), "working tree")
    if not old.events and not old.schemas and old.envelope is None:
        return Outcome([f"note: no registry at {repo.prefix} in {label}; nothing to compare"], 0)
    report = compare(old, new)
    states = compare_states(old, new)
    lines = [f"note: {n}" for n in report.notes] + states
    waived, used = _waived(repo, schemas_dir, commit, report.breaking) if report.breaking else ([], [])
    for finding in report.findings:
        line = finding.line()
        lines.append(line.replace("BREAKING ", "ACCEPTED ", 1) if finding in waived else line)
    lines += [r.line() for r in report.rollouts]
    for accepted in used:
        lines.append(f"note: tightenings accepted up to {accepted.until[:10]}: {accepted.reason.strip()}")
    breaking = [f for f in report.breaking if f not in waived]
    changed_states = [line for line in states if line.startswith("BREAKING")]
    if changed_states:
        lines.append(
            f"{len(changed_states)} checkpoint schema(s) changed in place against {label}. A release still on"
            " that state version would drop or misread what the new one writes: raise the service's"
            " state_version, add a migration from the old one, then `make schemas`."
        )
        return Outcome(lines, 1)
    if breaking:
        lines.append(
            f"{len(breaking)} breaking change(s) against {label}. Keep the existing version"
            " compatible, or add a new version: define the model as v<N+1> (beside v<N>)"
            " with an upcaster from v<N>, list it in the topic yaml, then"
            " `chorus schemas generate`."
        )
        return Outcome(lines, 1)
    if not report.findings and not report.rollouts and not report.notes:
        lines.append(f"registry unchanged since {label}")
    else:
        lines.append(f"compatible with {label}")
    return Outcome(lines, 0)
