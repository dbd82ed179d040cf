"""The net under the routes' own scrubbing: once an endpoint's secrets are known, no log record of the process
carries them, in its message or in the traceback of an error chained under another, and an unexpected
error's text is scrubbed too."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.logging import RichHandler

from ifsynth.flows.llm import secrets

KEY = "sk-echoed-31f0c9aa7d"
PASSWORD = "pa55w0rd-xyz"


@pytest.fixture(autouse=True)
def forgotten() -> Iterator[None]:
    """The secrets and the record factory as they were: later tests of this process log as before."""
    made, known = logging.getLogRecordFactory(), list(secrets._known)
    yield
    logging.setLogRecordFactory(made)
    secrets._known[:] = known


def logged(logger: logging.Logger, message: str, *args: object, exc_info: bool = False, rich: bool = False) -> str:
    """What a handler of ``logger`` writes for one error record: the standard library's, or rich's with its own
    tracebacks, which renders the exception object itself."""
    out = io.StringIO()
    handler: logging.Handler = logging.StreamHandler(out)
    if rich:
        handler = RichHandler(console=Console(file=out, width=200), rich_tracebacks=True)
    logger.addHandler(handler)
    try:
        logger.error(message, *args, exc_info=exc_info)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_a_record_carries_no_remembered_secret_in_its_message_or_chained_traceback() -> None:
    logger = logging.getLogger("ifsynth.test.secrets")
    assert KEY in logged(logger, "refused %s", KEY), "nothing is scrubbed before a secret is known"
    secrets.remember([KEY, "", "EMPTY", PASSWORD])
    assert logged(logger, "refused %s, %s, %s", KEY, PASSWORD, "EMPTY") == "refused ***, ***, EMPTY\n"
    try:
        try:
            raise PermissionError(f"Incorrect API key provided: {KEY}")
        except PermissionError:
            raise RuntimeError("the endpoint refused the key") from None  # suppressed, but a library may not
    except RuntimeError as exc:
        exc.__suppress_context__ = False
        texts = [logged(logger, "failed", exc_info=True, rich=rich) for rich in (False, True)]
    for text in texts:
        assert "Incorrect API key provided: ***" in text and "RuntimeError: the endpoint refused the key" in text
        assert KEY not in text


def test_a_secret_that_holds_another_is_replaced_whole() -> None:
    secrets.remember(["abcdefgh", "xxabcdefghxx"])
    assert secrets.scrubbed("key xxabcdefghxx and abcdefgh") == "key *** and ***"


def test_a_record_that_cannot_be_formatted_carries_no_secret_either(capsys: pytest.CaptureFixture[str]) -> None:
    """A handler that fails to format a record prints its arguments and the error being handled."""
    secrets.remember([KEY])
    logger = logging.getLogger("ifsynth.test.secrets")
    try:
        raise RuntimeError(f"Incorrect API key provided: {KEY}")
    except RuntimeError:
        text = logged(logger, "retrying %d", KEY) + logged(logger, "retrying %d", KEY, exc_info=True)
    said = text + capsys.readouterr().err
    assert "retrying" in said and KEY not in said


def test_a_traceback_without_a_secret_keeps_its_exception() -> None:
    secrets.remember([KEY])
    made: list[logging.LogRecord] = []
    try:
        raise ValueError("nothing secret")
    except ValueError:
        made.append(logging.getLogRecordFactory()("x", logging.ERROR, "f", 1, "failed", (), sys.exc_info()))
    assert made[0].exc_info is not None and made[0].exc_info[0] is ValueError


def test_remembering_again_keeps_one_factory() -> None:
    secrets.remember([KEY])
    made = logging.getLogRecordFactory()
    secrets.remember([KEY, "another-secret"])
    assert logging.getLogRecordFactory() is made
