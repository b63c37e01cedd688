"""The `llmdeck` command: starts the app, or runs a subcommand for a second SSH window.

Imports stay lazy so `--version` and `--help` answer instantly without loading Textual,
torch or a model.
"""

from __future__ import annotations

import argparse
import errno
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.app import LlmdeckApp


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~20 ms: only for --version

    try:
        return version("llmdeck")
    except PackageNotFoundError:
        return "0+unknown"


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked (argparse's own action needs the
    string when the parser is built, i.e. on every start)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        sys.stdout.write(f"llmdeck {_version()}\n")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmdeck",
        description="A full-screen terminal app for running LLMs locally. "
        "Run with no arguments to open the app: it attaches to this home's engine service "
        "(starting it in the background when none runs), so several terminals share one "
        "history and one copy of each model, and a reply goes on when its terminal closes. "
        "`llmdeck service status|stop` shows or ends the service; it also exits by itself "
        "after an idle time with no app and no reply.",
        epilog="Files live under LLMDECK_HOME when it is set, else in the usual per-user folders.",
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="show program's version number and exit")
    parser.add_argument("--model", help="a .gguf file or an MLX model folder to chat with")
    parser.add_argument("--in-process", action="store_true",
                        help="run the models inside this app instead of the engine service "
                        "(one such app per home; also LLMDECK_IN_PROCESS=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("workers", help="print the worker status table (for a second SSH window)")
    models = sub.add_parser("models", help="search, pull, list, remove or import models",
                            add_help=False)
    models.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("pull", help="download a model in the engine service (models pull); it "
                   "goes on when this terminal goes")
    sub.add_parser("paths", help="print where llmdeck keeps its files")
    sub.add_parser("mcp", help="run an MCP server (stdio) that lets other agents search your "
                   "conversations and documents, read-only, as turned on in settings")
    doctor = sub.add_parser("doctor", help="check this machine and llmdeck's files; each "
                            "problem with its fix (exit 1 on a problem)", add_help=False)
    doctor.add_argument("rest", nargs=argparse.REMAINDER)
    serve = sub.add_parser("serve", help="serve the local models over HTTP: OpenAI (/v1), Anthropic "
                           "(Claude Code) and Ollama APIs, for agents and front ends",
                           add_help=False)
    serve.add_argument("rest", nargs=argparse.REMAINDER)
    cluster = sub.add_parser("cluster", help="start, stop or show a cluster: one model across "
                             "several Macs (up|down|status NAME)", add_help=False)
    cluster.add_argument("rest", nargs=argparse.REMAINDER)
    service = sub.add_parser("service", help="the engine service every llmdeck front end "
                             "shares (start|stop|restart|status)", add_help=False)
    service.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `llmdeck workers | head`: the reader had enough, no traceback
        _quiet_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as exc:  # a read-only or foreign home: a sentence, not a traceback
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        print(f"llmdeck cannot write to {exc.filename or 'its folders'} ({exc.strerror}). "
              "Make it writable, or point LLMDECK_HOME at a folder you can write to.",
              file=sys.stderr)
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit has nowhere to
    fail (Python's own advice for SIGPIPE)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:  # its own parser: REMAINDER would not pass leading --options
        from core.service import service_serve_main

        # One `serve` per home still (the refusal names its pid); with the service, the
        # listener itself opens inside the service, over the app's pool.
        if not {"-h", "--help"} & set(argv) and not _lock_home("serve"):
            return 1
        return service_serve_main(argv[1:])
    if argv[:1] == ["doctor"] and any(a.startswith("--cluster") for a in argv):
        from core.commands import cluster_doctor_main

        return cluster_doctor_main(argv[1:])
    if argv[:1] == ["doctor"]:  # likewise: `doctor --offline`
        from core.commands import doctor_main

        return doctor_main(argv[1:])
    if argv[:1] == ["models"]:  # likewise: `models --help`
        return _models(argv[1:])
    if argv[:1] == ["pull"]:  # short for `models pull` (issue 45), as Ollama's
        return _models(argv)
    if argv[:1] == ["service"]:  # likewise: `service run --engine scripted`
        from core.service import service_main

        return service_main(argv[1:])
    if argv[:1] == ["cluster"]:  # likewise: `cluster up NAME --timeout 60`
        from core.commands import cluster_main

        return cluster_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "mcp":
        from core.service import service_mcp_main as mcp_main

        return mcp_main()
    if args.command == "workers":
        from core.commands import clusters_report, workers_main
        from core.service import service_workers_main

        code = service_workers_main()
        if code is None:  # no service runs: the status files of an app or a server
            code = workers_main()
        clusters = clusters_report()  # several Macs on one model (issue 35)
        if clusters:
            print(f"\nclusters:\n{clusters}")
        return 0 if clusters else code
    if args.command == "paths":
        from core import paths

        for name in ("data_dir", "config_dir", "log_dir", "cache_dir", "models_dir", "db_path",
                     "runtime_dir", "hf_cache_dir"):  # the last: downloaded models
            print(f"{name:12} {getattr(paths, name)()}")
        return 0
    return _run_app(args.model, _in_process(args.in_process))


def _models(rest: list[str]) -> int:
    if rest and rest[0] == "import":
        from core.commands import import_gguf_main as import_main

        return import_main(rest[1:])
    if rest and rest[0] == "restore-default":
        from core.commands import provision_bundled_chat

        print(provision_bundled_chat(overwrite=True))
        return 0
    from core.service import downloads_main, pull_in_service, pull_main

    if rest[:1] == ["downloads"]:  # the service's jobs (issue 45)
        return downloads_main()
    if rest[:1] == ["pull"] and pull_in_service(rest[1:]):
        return pull_main(rest[1:])
    from core.commands import hub_cli_main as hub_main

    return hub_main(rest)


def build_app(model: str | None = None, *, in_process: bool = True) -> LlmdeckApp:
    """The app `llmdeck` runs, built as it starts it (bench/ui.py times this same path).
    Always the engine service's client (tui.service_runtime): of this home's service,
    which it starts when none runs; or, in process (tests, `--in-process`), of a service
    inside this process that owns a Runtime, over the same protocol and codec
    (core.service.loopback), so there is one code path."""
    from tui import gc_tuning, terminal_answers, terminal_input

    gc_tuning.pause_full_collections()  # until the app is up (settle_after_start)
    terminal_input.install()  # a non-UTF-8 paste must not kill the input thread
    terminal_answers.install()  # answers to "what do you draw?" must not become keys
    from core.config import Settings
    from tui.app import LlmdeckApp
    from tui.service_runtime import ServiceRuntime

    settings = Settings.load()
    model = model_argument(model)
    if not in_process:
        return LlmdeckApp(ServiceRuntime(settings, model=model))
    from core.runtime import Runtime

    if model:
        settings.model = model
        settings.engine = None
    return LlmdeckApp(ServiceRuntime(settings, local=Runtime(settings)))


def model_argument(model: str | None) -> str | None:
    """`--model PATH` made absolute where it was typed: the detached service loads it from a
    folder of its own. A name that is no file here (a hub id, a preset) is passed as is."""
    import os

    if not model or not os.path.exists(os.path.expanduser(model)):
        return model  # no `--model`: nothing of the service's client to import (~5 ms)
    from core.service import typed_here

    return typed_here(model)


# Whether `llmdeck` is the engine service's client when nothing says otherwise. The suite
# runs it so too: each test's service is stopped at its end (tests/conftest.py).
SERVICE_BY_DEFAULT = True


def _in_process(argv_flag: bool) -> bool:
    """The app runs its own Runtime (and takes the home lock) with the hidden
    `--in-process` flag or LLMDECK_IN_PROCESS=1; LLMDECK_IN_PROCESS=0 makes it the
    service's client, and otherwise SERVICE_BY_DEFAULT decides."""
    import os

    wanted = os.environ.get("LLMDECK_IN_PROCESS", "")
    if argv_flag or wanted not in ("", "0"):
        return True
    return wanted != "0" and not SERVICE_BY_DEFAULT


def _lock_home(role: str) -> bool:
    """Take this home's lock for the app or the server (core.home_lock), or say on stderr
    who holds it / why the home cannot be written."""
    from core.commands import HomeLockError, acquire

    try:
        acquire(role)
    except HomeLockError as exc:
        print(exc.message, file=sys.stderr)
        return False
    return True


def _service_holder() -> int | None:
    from core.commands import holder

    return holder("service")


def _run_app(model: str | None, in_process: bool = False) -> int:
    """Open the app. As the service's client it takes no lock (the service holds the
    home's): any number of `llmdeck` share one history and one copy of each model."""
    if in_process and not _lock_home("app"):
        return 1
    if in_process and (service := _service_holder()):
        print(f"llmdeck --in-process would start a second engine beside this home's service "
              f"({'pid ' + str(service) if service > 0 else 'running'}), and both would write "
              "one history. Run `llmdeck` (the service's client), or `llmdeck service stop` "
              "first.", file=sys.stderr)
        return 1
    build_app(model, in_process=in_process).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
