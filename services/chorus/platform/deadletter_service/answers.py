"""The API's answers, built from the store's rows: the models the dead-letter service
publishes (:mod:`chorus.contracts.api.deadletter_service`)."""

from __future__ import annotations

import base64
import dataclasses

from chorus.contracts.api.deadletter_service import (
    Done,
    Group,
    LetterDetail,
    LetterError,
    LetterErrorDetail,
    LetterSummary,
    Operation,
    OriginalHeader,
    OriginalPosition,
    OriginalRecord,
)
from chorus.kernel.records import b64_or_none
from chorus.platform.deadletter_service import operations
from chorus.platform.deadletter_service.adapters.repository import Group as GroupRow
from chorus.platform.deadletter_service.adapters.repository import Letter, OperationRow
from chorus.platform.deadletter_service.domain import parse_json, text_or_none


def letter_summary(letter: Letter) -> LetterSummary:
    """The letter's columns of the same name (``vars``: a shallow view, the summary copies
    none of the nested columns), its id as text, its error and position nested."""
    error = LetterError(
        category=letter.error_category, error_class=letter.error_class, message=letter.error_message
    )
    original = OriginalPosition(
        topic=letter.original_topic, partition=letter.original_partition, offset=letter.original_offset
    )
    return LetterSummary.model_validate(
        vars(letter) | {"id": str(letter.id), "error": error, "original": original}
    )


def letter_detail(letter: Letter, ops: list[OperationRow]) -> LetterDetail:
    summary = letter_summary(letter)
    value_json, is_json = parse_json(letter.original_value)
    headers = [
        OriginalHeader(
            key=h["key"],
            value_b64=h["value_b64"],
            value=text_or_none(base64.b64decode(h["value_b64"])) if h["value_b64"] is not None else None,
        )
        for h in letter.original_headers
    ]
    return LetterDetail(
        **{k: v for k, v in dict(summary).items() if k not in ("error", "original")},
        error=LetterErrorDetail(
            **dict(summary.error), traceback=letter.error_traceback, pointer=letter.error_pointer
        ),
        original=OriginalRecord(
            **dict(summary.original),
            key_b64=b64_or_none(letter.original_key),
            key=text_or_none(letter.original_key),
            headers=headers,
            timestamp_ms=letter.original_timestamp_ms,
            value_b64=b64_or_none(letter.original_value),
            value_is_json=is_json,
            value_json=value_json,
        ),
        failures=letter.failures,
        envelope=letter.envelope,
        operations=[operation_answer(o) for o in ops],
    )


def operation_answer(op: OperationRow) -> Operation:
    """The row's columns, by name (its letter id as text)."""
    return Operation.model_validate(dataclasses.asdict(op) | {"letter_id": str(op.letter_id)})


def group_answer(g: GroupRow) -> Group:
    """The row's columns, by name."""
    return Group.model_validate(g, from_attributes=True)


def done_answer(done: operations.Done) -> Done:
    return Done(letter=letter_summary(done.letter), operation=operation_answer(done.operation))
