"""Which event models a body of code schedules as timer targets, found by reading its
source (``ast``), never by running it.

A handler asks for a timer with ``ScheduleTimer(..., event=Model(...))`` (chorus.kernel.service);
the runtime turns it into a ``timer.schedule`` command whose fire target the timer service
publishes when it falls due. Code outside handlers (the gateway's API, the runtime's own
retries) builds that command itself: ``TimerSchedule(fire=FireTarget(value=<an envelope of
Model(...)>))``. Both are found here: the classes called inside the event argument or the fire
target, following local variables back to their assignments in the same function.

What it cannot see: a model built in another function and passed in (``ScheduleTimer(id,
at, event)`` with ``event`` a parameter). A public module-level function that schedules
(``chorus.outside.stages.open_stage``) is kept as a helper: code that calls it schedules what it does.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from chorus.contracts.platform import TimerSchedule
from chorus.kernel.service import ScheduleTimer

TARGET_ARGUMENT: dict[str, tuple[str, int | None]] = {
    ScheduleTimer.__name__: ("event", [f.name for f in dataclasses.fields(ScheduleTimer)].index("event")),
    TimerSchedule.__name__: ("fire", None),  # a pydantic model: keyword arguments only
}
"""Callee name -> (keyword, position) of the argument that holds what fires."""

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class CodeScan:
    """What one package's source says, by class and function name (not yet event types)."""

    scheduled: set[str] = field(default_factory=set)
    """Names called inside a timer's target, outside the public helpers."""
    helpers: dict[str, set[str]] = field(default_factory=dict)
    """Public module-level function -> names called inside the timer targets it builds."""
    called: set[str] = field(default_factory=set)
    """Every name the code calls (classes it constructs, functions it uses)."""

    def schedules(self, helpers: dict[str, set[str]]) -> set[str]:
        """Names a service's package schedules: in any of its functions (its public ones are
        its handlers), or through the ``helpers`` of a library it calls."""
        through = (names for helper, names in helpers.items() if helper in self.called)
        return self.scheduled.union(*self.helpers.values(), *through)

    def own_schedules(self) -> set[str]:
        """Names a library schedules for itself: its public helpers count only where it calls
        them (the others are for its callers, ``schedules``)."""
        return self.scheduled.union(*(names for h, names in self.helpers.items() if h in self.called))


@cache
def scan_package(folder: Path, leave_out: frozenset[str] = frozenset()) -> CodeScan:
    """Every ``*.py`` under ``folder`` (a package), but under its subpackages ``leave_out``."""
    scan = CodeScan()
    for path in sorted(folder.rglob("*.py")):
        if path.relative_to(folder).parts[0] in leave_out:
            continue
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        scan.called |= {name for node in ast.walk(tree) if (name := _callee(node))}
        if not any(callee in text for callee in TARGET_ARGUMENT):
            continue  # schedules nothing: most files, skipped cheaply
        public = {n.name for n in tree.body if isinstance(n, Function) and not n.name.startswith("_")}
        for fn in _functions(tree):
            targets = _timer_targets(fn)
            if targets and fn.name in public:
                scan.helpers.setdefault(fn.name, set()).update(targets)
            else:
                scan.scheduled |= targets
    return scan


def _functions(tree: ast.Module) -> Iterator[Function]:
    for node in ast.walk(tree):
        if isinstance(node, Function):
            yield node


def _timer_targets(fn: Function) -> set[str]:
    """Names called in the targets of the timers ``fn`` itself schedules (nested functions
    are scanned on their own)."""
    assigned: dict[str, list[ast.expr]] = {}
    calls: list[ast.Call] = []
    for node in _own_nodes(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and isinstance(node.target, ast.Name):
            if node.value is not None:
                assigned.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.Call):
            calls.append(node)
    found: set[str] = set()
    for call in calls:
        argument = _target_argument(call)
        if argument is not None:
            found |= _called_in(argument, assigned, set())
    return found


def _own_nodes(fn: Function) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, not descending into functions defined inside it."""
    pending: list[ast.AST] = list(fn.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, Function | ast.Lambda | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))


def _target_argument(call: ast.Call) -> ast.expr | None:
    spot = TARGET_ARGUMENT.get(_callee(call) or "")
    if spot is None:
        return None
    keyword, position = spot
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _called_in(expr: ast.expr, assigned: dict[str, list[ast.expr]], seen: set[str]) -> set[str]:
    """Names called in ``expr``, and in what its local variables were assigned."""
    names: set[str] = set()
    for node in ast.walk(expr):
        name = _callee(node)
        if name:
            names.add(name)
        elif isinstance(node, ast.Name) and node.id in assigned and node.id not in seen:
            seen.add(node.id)
            for value in assigned[node.id]:
                names |= _called_in(value, assigned, seen)
    return names


def _callee(node: ast.AST) -> str | None:
    """``Model`` of ``Model(...)`` or ``module.Model(...)``; None for anything else."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None
