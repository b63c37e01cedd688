"""The command line: `llmdeck serve`'s numbers are checked where they are typed (a port
past 65535 raised OverflowError from bind(), and a queue of 0 or a negative timeout
started a server that refused or dropped everything), and `--help` after a command shows
that command's help."""

from __future__ import annotations

import pytest

from core.server.cli import parser


@pytest.mark.parametrize(("args", "words"), [
    (["--port", "99999"], "--port: must be between 0 and 65535"),
    (["--port", "-1"], "--port: must be between 0 and 65535"),
    (["--port", "http"], "--port: 'http' is not a whole number"),
    (["--max-queue", "0"], "--max-queue: must be 1 or more"),
    (["--max-connections", "0"], "--max-connections: must be 1 or more"),
    (["--replicas", "-2"], "--replicas: must be between 1 and 64"),
    (["--idle-timeout", "0"], "--idle-timeout: must be a number of seconds, above 0"),
    (["--idle-timeout", "inf"], "--idle-timeout: must be a number of seconds, above 0"),
    (["--load-wait", "nan"], "--load-wait: must be a number of seconds, 0 or more"),
    (["--load-wait", "soon"], "--load-wait: 'soon' is not a number of seconds"),
])
def test_a_number_out_of_range_is_refused_naming_the_flag(capsys, args: list[str],
                                                         words: str) -> None:
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(args)
    assert stop.value.code == 2 and words in capsys.readouterr().err


def test_numbers_in_range_are_taken() -> None:
    args = parser().parse_args(["--port", "0", "--max-queue", "1", "--replicas", "64",
                                "--idle-timeout", "0.5", "--load-wait", "0"])
    assert (args.port, args.max_queue, args.replicas, args.idle_timeout, args.load_wait) == \
        (0, 1, 64, 0.5, 0.0)


@pytest.mark.parametrize("command", ["serve", "models", "doctor"])
def test_help_after_a_command_is_that_commands_help(capsys, command: str) -> None:
    """`llmdeck models --help` used to fail with 'unrecognized arguments: --help'."""
    from tui.cli import main

    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and f"usage: llmdeck {command}" in out
    if command == "models":
        assert "models import" in out and "restore-default" in out
        # the service's download jobs (README: Downloads) were in no help text
        assert "models downloads" in out and "pull --cancel" in out
