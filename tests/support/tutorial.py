"""Executable Markdown: run a tutorial's commands so that it cannot go stale.

A test parses a tutorial (``parse``) and runs its steps (``run``, or ``run_markdown`` for a
file) in a scratch working directory; the first command whose exit status or output differs
from what the page shows fails the test, naming the Markdown line.

Conventions of the Markdown (fences of three or more backticks or tildes, closed by a fence of
the same character at least as long; the content of a fence indented inside a list loses that
indentation):

- A fenced block whose info string is ``console`` is a shell session. A line starting with
  ``$ `` is a command; a command whose line ends with a backslash continues on the next line
  (the backslash-newline is kept: bash joins the lines). The lines after a command, up to the
  next ``$ `` line or the end of the block, are its expected output: stdout and stderr merged,
  in the order the command wrote them. Only blank lines may precede a block's first command.
  An expected-output line cannot start with ``$ ``, and a here-document cannot be written in
  a session (its body would read as output): write files with ``file=`` blocks instead.
- Output matching: lines are compared after stripping trailing whitespace, and trailing blank
  lines are ignored. An expected line consisting only of ``...`` matches zero or more actual
  lines; within a line, ``...`` matches any run of characters (``wrote ... file(s)`` matches
  ``wrote 3 file(s)``). An empty expected output accepts any output: only the exit status is
  checked.
- A command must exit 0, unless its last line ends with the comment ``# exit N``: then it
  must exit with N. The comment is removed before the command runs.
- A fenced block whose info string is a language followed by ``file=RELATIVE/PATH`` (e.g.
  ``yaml file=schemas/workflows.yaml``) writes its content to that path, relative to the
  working directory: parent directories are created and an existing file is replaced. With
  ``append=RELATIVE/PATH`` instead, the content is appended to that file, which must exist.
  Paths must stay inside the working directory (no absolute path, no ``..``).
- Every other fenced block (plain ``python``, ``text``, ...) is prose and is ignored.

Blocks run in document order. Each command runs as ``bash -c COMMAND`` from the working
directory (a ``cd`` does not carry over to the next command; ``cd x && ...`` works), with
exactly the given environment (not merged with ``os.environ``), no stdin, and a timeout.
A command may leave a process running in the background: the runner waits for the shell to
exit, not for everything it started; on timeout the command's whole process group is killed.
Programs that buffer their output when it is not a terminal (Python without
``PYTHONUNBUFFERED=1``) may interleave stdout and stderr differently from a terminal.

Malformed Markdown (an unclosed fence, output before any command, a path leaving the working
directory) raises ``ValueError`` from ``parse``; a step that does not do what the page shows
raises ``AssertionError`` from ``run``.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import operator
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_EXIT_COMMENT = re.compile(r"\s+#\s*exit\s+(?P<code>\d+)\s*$")
_WILDCARD = "..."


class Action(Enum):
    """What a step does."""

    RUN = "run"
    WRITE = "write"
    APPEND = "append"


@dataclass(frozen=True)
class Step:
    """One executable thing on the page, at Markdown line ``line`` (1-based).

    ``RUN``: ``command`` (without its ``# exit N`` comment) must exit ``expected_exit`` and
    print ``expected_output`` (as written, trailing blank lines dropped). ``WRITE`` and
    ``APPEND``: ``content`` goes to ``path``, relative to the working directory; ``line`` is
    that of the opening fence.
    """

    action: Action
    line: int
    command: str = ""
    expected_output: tuple[str, ...] = ()
    expected_exit: int = 0
    path: str = ""
    content: str = ""


def parse(markdown: str) -> list[Step]:
    """The steps of ``markdown``, in document order. Raises ``ValueError`` if malformed."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    steps: list[Step] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        fence_line = index + 1
        body, index = _fenced_body(lines, index + 1, opening["fence"], len(opening["indent"]), fence_line)
        steps.extend(_block_steps(opening["info"].split(), body, fence_line))
    return steps


def run(
    steps: list[Step], workdir: Path, env: Mapping[str, str], timeout_s: float = 600, wrap: Sequence[str] = ()
) -> None:
    """Execute ``steps`` in order in ``workdir`` (an existing directory), each command with
    environment ``env`` and at most ``timeout_s`` seconds, as ``[*wrap, "bash", "-c", command]``
    (``wrap``: a program that runs bash somewhere else, e.g. ``ip netns exec NAME``; it must
    exec it, so that a timeout kills bash's process group).

    Raises ``AssertionError`` at the first step that does not do what the page shows (exit
    status, output, timeout, missing file to append to); later steps do not run.
    """
    _run(steps, workdir, env, timeout_s, wrap, source=None)


def run_markdown(
    path: Path, workdir: Path, env: Mapping[str, str], timeout_s: float = 600, wrap: Sequence[str] = ()
) -> None:
    """``run(parse(path's text), ...)``; failures name the place as ``path:line``."""
    _run(parse(path.read_text(encoding="utf-8")), workdir, env, timeout_s, wrap, source=path)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` output lines satisfy ``expected`` under the module's rules.

    Trailing whitespace and trailing blank lines are ignored on both sides; an empty
    ``expected`` accepts anything; a ``...`` line matches zero or more lines and ``...``
    inside a line matches any run of characters.
    """
    pattern, lines = _normalized(expected), _normalized(actual)
    if not pattern:
        return True
    # reachable[j]: the pattern lines consumed so far can match exactly the first j actual lines.
    reachable = [True] + [False] * len(lines)
    for item in pattern:
        if item.strip() == _WILDCARD:
            # Zero or more lines: once a prefix is reachable, every longer prefix is too.
            reachable = list(itertools.accumulate(reachable, operator.or_))
        else:
            regex = _line_regex(item)
            reachable = [False] + [
                reachable[j] and regex.fullmatch(line) is not None for j, line in enumerate(lines)
            ]
    return reachable[-1]


def _fenced_body(
    lines: list[str], start: int, fence: str, indent: int, fence_line: int
) -> tuple[list[str], int]:
    """The lines of the block opened just before ``start``, and the index after its closing fence."""
    for index in range(start, len(lines)):
        closing = _FENCE.match(lines[index])
        if (
            closing is not None
            and closing["fence"][0] == fence[0]
            and len(closing["fence"]) >= len(fence)
            and not closing["info"].strip()
        ):
            return [_dedent(line, indent) for line in lines[start:index]], index + 1
    raise ValueError(f"line {fence_line}: fenced block is never closed")


def _dedent(line: str, indent: int) -> str:
    removable = len(line) - len(line.lstrip(" "))
    return line[min(indent, removable) :]


def _block_steps(info: list[str], body: list[str], fence_line: int) -> list[Step]:
    if info[:1] == ["console"]:
        return _session_steps(body, fence_line)
    targets = [word for word in info[1:] if word.startswith(("file=", "append="))]
    if not targets:
        return []
    if len(targets) > 1:
        raise ValueError(f"line {fence_line}: a block writes to one file, not {targets}")
    key, _, path = targets[0].partition("=")
    _check_relative(path, fence_line)
    content = "".join(f"{line}\n" for line in body)
    action = Action.WRITE if key == "file" else Action.APPEND
    return [Step(action=action, line=fence_line, path=path, content=content)]


def _check_relative(path: str, fence_line: int) -> None:
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"line {fence_line}: {path!r} is not a path inside the working directory")


def _session_steps(body: list[str], fence_line: int) -> list[Step]:
    steps: list[Step] = []
    index = 0
    while index < len(body):
        if not body[index].startswith("$ "):
            if body[index].strip():
                raise ValueError(f"line {fence_line + 1 + index}: output before any command")
            index += 1
            continue
        command_line = fence_line + 1 + index
        command = [body[index][2:]]
        while command[-1].endswith("\\"):
            index += 1
            if index == len(body):
                raise ValueError(f"line {command_line}: command continues past the end of its block")
            command.append(body[index])
        index += 1
        output_start = index
        while index < len(body) and not body[index].startswith("$ "):
            index += 1
        output = body[output_start:index]
        while output and not output[-1].strip():
            output.pop()
        text, expected_exit = _split_exit_comment("\n".join(command))
        steps.append(
            Step(
                action=Action.RUN,
                line=command_line,
                command=text,
                expected_output=tuple(output),
                expected_exit=expected_exit,
            )
        )
    return steps


def _split_exit_comment(command: str) -> tuple[str, int]:
    comment = _EXIT_COMMENT.search(command)
    if comment is None:
        return command, 0
    return command[: comment.start()], int(comment["code"])


def _run(
    steps: list[Step],
    workdir: Path,
    env: Mapping[str, str],
    timeout_s: float,
    wrap: Sequence[str],
    source: Path | None,
) -> None:
    for step in steps:
        where = f"{source}:{step.line}" if source is not None else f"line {step.line}"
        if step.action is Action.RUN:
            _run_command(step, workdir, env, timeout_s, wrap, where)
            continue
        target = workdir / step.path
        if step.action is Action.WRITE:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.content, encoding="utf-8")
        else:
            if not target.is_file():
                raise AssertionError(f"{where}: append={step.path}: no such file to append to")
            with target.open("a", encoding="utf-8") as file:
                file.write(step.content)


def _run_command(
    step: Step, workdir: Path, env: Mapping[str, str], timeout_s: float, wrap: Sequence[str], where: str
) -> None:
    # Output goes to a file, not a pipe: a server the command starts in the background keeps
    # a pipe open for as long as it lives, and the runner would wait for it until the timeout.
    with tempfile.TemporaryFile() as output_file:
        process = subprocess.Popen(
            [*wrap, "bash", "-c", step.command],
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=output_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            exit_code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            exit_code = None
        output_file.seek(0)
        output = output_file.read().decode("utf-8", errors="replace")
    actual = output.split("\n")
    expected = list(step.expected_output)
    if exit_code is None:
        problem = f"timed out after {timeout_s}s"
    elif exit_code != step.expected_exit:
        problem = f"exited {exit_code}, expected {step.expected_exit}"
    elif not matches(expected, actual):
        problem = f"exited {exit_code} as expected, but its output differs"
    else:
        return
    raise AssertionError(f"{where}: command {problem}\n$ {step.command}\n{_describe(expected, actual)}")


def _describe(expected: list[str], actual: list[str]) -> str:
    """Expected against actual output, as a unified diff (``...`` lines show as differences)."""
    wanted, got = _normalized(expected), _normalized(actual)
    if not wanted:
        return "(any output expected); actual output:\n" + "\n".join(got)
    diff = difflib.unified_diff(wanted, got, "expected", "actual", n=max(len(wanted), len(got)), lineterm="")
    return "\n".join(diff) or "expected and actual output are identical:\n" + "\n".join(got)


def _normalized(lines: list[str]) -> list[str]:
    stripped = [line.rstrip() for line in lines]
    while stripped and not stripped[-1]:
        stripped.pop()
    return stripped


def _line_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split(_WILDCARD)))
