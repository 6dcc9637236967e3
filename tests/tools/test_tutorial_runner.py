"""The tutorial runner: executable Markdown fails when the page and the program disagree."""

from __future__ import annotations

import os
import re
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.tutorial import Action, Step, matches, parse, run, run_markdown

ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}


def md(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def run_page(markdown: str, workdir: Path, timeout_s: float = 30) -> None:
    run(parse(md(markdown)), workdir, ENV, timeout_s=timeout_s)


def test_a_session_whose_output_matches_passes(tmp_path: Path) -> None:
    run_page(
        """
        # Hello

        ```console
        $ echo hello
        hello
        $ printf 'a\\nb\\n'
        a
        b
        ```
        """,
        tmp_path,
    )


def test_parse_gives_commands_with_line_numbers_and_expected_output() -> None:
    steps = parse(
        md(
            """
            Intro.

            ```console
            $ echo one
            one

            $ false  # exit 1
            ```
            """
        )
    )
    assert steps == [
        Step(action=Action.RUN, line=4, command="echo one", expected_output=("one",)),
        Step(action=Action.RUN, line=7, command="false", expected_exit=1),
    ]


def test_an_output_mismatch_names_the_line_the_command_and_both_outputs(tmp_path: Path) -> None:
    page = """
        Text.

        ```console
        $ echo fine
        fine
        $ echo actual words
        expected words
        ```
        """
    with pytest.raises(AssertionError) as failure:
        run_page(page, tmp_path)
    message = str(failure.value)
    assert message.startswith("line 6: ")
    assert "$ echo actual words" in message
    assert "-expected words" in message
    assert "+actual words" in message
    assert "exited 0" in message


def test_a_dots_line_matches_any_number_of_lines(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ printf 'first\\nnoise 1\\nnoise 2\\nlast\\n'
        first
        ...
        last
        $ printf 'first\\nlast\\n'
        first
        ...
        last
        ```
        """,
        tmp_path,
    )


def test_dots_inside_a_line_match_any_characters(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ echo 'wrote 3 file(s) in 0.2s'
        wrote ... file(s) in ...s
        ```
        """,
        tmp_path,
    )
    with pytest.raises(AssertionError, match="output differs"):
        run_page(
            """
            ```console
            $ echo 'wrote 3 files'
            wrote ... file(s)
            ```
            """,
            tmp_path,
        )


def test_a_dots_line_does_not_excuse_a_missing_line(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="line 2"):
        run_page(
            """
            ```console
            $ printf 'first\\nmiddle\\n'
            first
            ...
            last
            ```
            """,
            tmp_path,
        )


def test_an_announced_exit_status_is_accepted(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ echo oops >&2; exit 2  # exit 2
        oops
        ```
        """,
        tmp_path,
    )


def test_a_wrong_exit_status_is_refused_even_with_matching_output(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"line 2: command exited 1, expected 2") as failure:
        run_page(
            """
            ```console
            $ echo oops; exit 1  # exit 2
            oops
            ```
            """,
            tmp_path,
        )
    assert "$ echo oops; exit 1\n" in str(failure.value)


def test_a_failing_command_without_an_exit_comment_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"line 3: command exited 3, expected 0"):
        run_page(
            """
            ```console
            $ true
            $ exit 3
            ```
            """,
            tmp_path,
        )


def test_a_command_continues_over_lines_ending_with_a_backslash(tmp_path: Path) -> None:
    page = """
        ```console
        $ printf '%s-%s\\n' \\
            left \\
            right
        left-right
        $ echo after
        after
        ```
        """
    steps = parse(md(page))
    assert [step.line for step in steps] == [2, 6]
    assert steps[0].expected_output == ("left-right",)
    run(steps, tmp_path, ENV, timeout_s=30)


def test_the_exit_comment_of_a_multi_line_command_is_on_its_last_line(tmp_path: Path) -> None:
    steps = parse(
        md(
            """
            ```console
            $ echo a \\
                b; exit 4  # exit 4
            a b
            ```
            """
        )
    )
    assert steps[0].expected_exit == 4
    assert "#" not in steps[0].command
    run(steps, tmp_path, ENV, timeout_s=30)


def test_file_and_append_blocks_write_files_a_later_command_reads(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "app.yaml").write_text("stale: true\n")
    run_page(
        """
        ```python file=services/triage/handlers.py
        def on_ticket_opened() -> None:
            pass
        ```

        ```yaml file=conf/app.yaml
        name: triage
        ```

        ```yaml append=conf/app.yaml
        replicas: 2
        ```

        ```console
        $ cat conf/app.yaml
        name: triage
        replicas: 2
        $ grep -c def services/triage/handlers.py
        1
        ```
        """,
        tmp_path,
    )
    assert (tmp_path / "services/triage/handlers.py").read_text() == (
        "def on_ticket_opened() -> None:\n    pass\n"
    )
    assert (tmp_path / "conf/app.yaml").read_text() == "name: triage\nreplicas: 2\n"


def test_appending_to_a_missing_file_fails_at_its_fence(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"line 2: append=missing.txt"):
        run_page(
            """
            Text.
            ```text append=missing.txt
            more
            ```
            """,
            tmp_path,
        )


def test_prose_blocks_are_ignored(tmp_path: Path) -> None:
    page = """
        ```python
        $ touch from-python
        ```

        ```text
        $ false
        ```

        ~~~
        $ touch from-plain
        ~~~

        ```console
        $ ls
        ```
        """
    steps = parse(md(page))
    assert [step.command for step in steps] == ["ls"]
    run(steps, tmp_path, ENV, timeout_s=30)
    assert list(tmp_path.iterdir()) == []


def test_empty_expected_output_accepts_any_output(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ seq 1 50; echo warning >&2
        $ echo next
        next
        ```
        """,
        tmp_path,
    )


def test_stderr_and_stdout_are_merged_in_order(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ echo out1; echo err >&2; echo out2
        out1
        err
        out2
        ```
        """,
        tmp_path,
    )


def test_trailing_whitespace_and_trailing_blank_lines_are_ignored(tmp_path: Path) -> None:
    run_page(
        """
        ```console
        $ printf 'value   \\n\\n\\n'
        value
        ```
        """,
        tmp_path,
    )


def test_each_command_starts_in_the_working_directory_with_the_given_environment(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    steps = parse(
        md(
            """
            ```console
            $ cd sub && pwd
            .../sub
            $ pwd
            WORKDIR
            $ echo "$GREETING ${HOME:-no home}"
            hi no home
            ```
            """
        ).replace("WORKDIR", str(tmp_path.resolve()))
    )
    run(steps, tmp_path, {**ENV, "GREETING": "hi"}, timeout_s=30)


def test_wrap_runs_each_command_through_another_program(tmp_path: Path) -> None:
    # `env NAME=value` execs bash as `ip netns exec NS` does: the page's commands run inside it.
    steps = parse(
        md("""
        ```console
        $ echo "$WHERE"
        wrapped
        ```
        """)
    )
    run(steps, tmp_path, ENV, timeout_s=30, wrap=["env", "WHERE=wrapped"])
    with pytest.raises(AssertionError, match="output differs"):
        run(steps, tmp_path, ENV, timeout_s=30)


def test_the_first_failure_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="line 2"):
        run_page(
            """
            ```console
            $ false
            $ touch later
            ```
            """,
            tmp_path,
        )
    assert not (tmp_path / "later").exists()


def test_a_command_past_its_timeout_fails_with_its_output_so_far(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"line 2: command timed out") as failure:
        run_page(
            """
            ```console
            $ echo started; sleep 30
            ```
            """,
            tmp_path,
            timeout_s=0.5,
        )
    assert "started" in str(failure.value)
    assert time.monotonic() - started < 10


def test_a_background_process_does_not_hold_the_command(tmp_path: Path) -> None:
    started = time.monotonic()
    run_page(
        """
        ```console
        $ (sleep 30 >/dev/null 2>&1 &) ; echo launched
        launched
        ```
        """,
        tmp_path,
    )
    assert time.monotonic() - started < 10


def test_run_markdown_names_the_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "tutorial.md"
    page.write_text(md("# T\n\n```console\n$ echo no\nyes\n```\n"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(AssertionError, match=f"^{re.escape(str(page))}:4: "):
        run_markdown(page, workdir, ENV, timeout_s=30)


def test_fences_indented_in_a_list_lose_their_indentation(tmp_path: Path) -> None:
    steps = parse(
        md(
            """
            1. Write the file:

               ```text file=notes.txt
               indented once
                 twice
               ```
            """
        )
    )
    assert steps == [Step(action=Action.WRITE, line=3, path="notes.txt", content="indented once\n  twice\n")]


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("```console\n$ echo never closed\n", "line 1: fenced block is never closed"),
        ("```console\nhello\n$ echo\n```\n", "line 2: output before any command"),
        ("```console\n$ echo \\\n```\n", "line 2: command continues past the end"),
        ("```text file=/etc/passwd\nx\n```\n", "not a path inside the working directory"),
        ("```text file=../outside\nx\n```\n", "not a path inside the working directory"),
    ],
)
def test_malformed_markdown_is_refused_when_parsed(page: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(page)


def test_matches_rules() -> None:
    assert matches([], ["anything"])
    assert matches(["..."], [])
    assert matches(["a", "...", "z"], ["a", "z"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not matches(["a", "...", "z"], ["a", "b"])
    assert matches(["took ...ms"], ["took 12ms"])
    assert not matches(["took ...ms"], ["took 12s"])
    assert matches(["a.b"], ["a.b"])
    assert not matches(["a.b"], ["axb"])
    assert not matches(["a"], ["a", "b"])
    assert matches(["a  "], ["a", "", ""])


_LINE = st.text(st.characters(exclude_characters="\n\r"), max_size=12).filter(lambda line: "..." not in line)


@given(st.lists(_LINE, max_size=8), st.lists(_LINE, max_size=8))
def test_without_dots_a_non_empty_expectation_matches_only_itself(
    expected: list[str], actual: list[str]
) -> None:
    def normal(lines: list[str]) -> list[str]:
        stripped = [line.rstrip() for line in lines]
        while stripped and not stripped[-1]:
            stripped.pop()
        return stripped

    assert matches(expected, expected)
    assert matches(["..."], actual)
    if normal(expected):
        assert matches(expected, actual) == (normal(expected) == normal(actual))
