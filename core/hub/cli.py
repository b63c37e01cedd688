"""`llmdeck models search|files|pull|list|rm`: the hub from a second SSH window.

Results go to stdout (plain columns, easy to grep); progress bars and messages go to
stderr. Every repo id, file name and sentence from the Hub is outside text: it is
printed through core.terminal_text.visible, so an escape sequence in a name (OSC 52 to
the clipboard, OSC 0 to the title, CSI 2J) shows as a picture and is never obeyed. Exit codes: 0 ok, 1 a hub error (its code is printed), 2 bad usage or a refused
confirmation, 130 interrupted (the partial download is kept for resume).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from core.hub.download import CancelToken, DownloadProgress, pull
from core.hub.errors import HubError
from core.hub.listing import list_files
from core.hub.registry import LocalModel, delete_model, find_model, list_local_models
from core.hub.runnable import human_bytes
from core.hub.search import search_models
from core.model_ids import id_line, id_of
from core.terminal_text import visible

EXIT_OK, EXIT_HUB_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmdeck models", description="Find, download and manage local models.",
        epilog="Also: `llmdeck models downloads` lists the engine service's download jobs "
        "(from any terminal) and `llmdeck models pull --cancel ID` ends one; "
        "`llmdeck models import FILE.gguf [--quantize 4|8]` turns a GGUF into an "
        "MLX folder; `llmdeck models restore-default` unpacks the bundled model again.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("search", help="search the Hub for MLX and GGUF models")
    s.add_argument("query", nargs="?", default="")
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--mlx", dest="fmt", action="store_const", const="mlx")
    fmt.add_argument("--gguf", dest="fmt", action="store_const", const="gguf")
    s.add_argument("--sort", choices=["downloads", "likes", "recent"], default="downloads")
    s.add_argument("--limit", type=int, default=20)
    f = sub.add_parser("files", help="list a repo's files with sizes and quant labels")
    f.add_argument("repo")
    f.add_argument("--revision")
    pl = sub.add_parser("pull", help="download a model (a GGUF file, or an MLX repo) in the "
                        "engine service; --here: in this terminal")
    pl.add_argument("repo")
    pl.add_argument("file", nargs="?", help="the GGUF file, when the repo has several")
    pl.add_argument("--revision")
    pl.add_argument("--no-mmproj", action="store_true", help="skip the vision projector")
    pl.add_argument("--here", action="store_true", help="download in this terminal (it stops "
                    "when this command does) instead of the engine service")
    sub.add_parser("list", help="models on this machine")
    rm = sub.add_parser("rm", help="delete a local model")
    rm.add_argument("model", help="an id from `llmdeck models list` (or the hub's handle)")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    return p


def main(argv: list[str]) -> int:
    """Run one `models` subcommand; argv excludes the word "models"."""
    args = _parser().parse_args(argv) if argv else _parser().parse_args(["--help"])
    try:
        return {
            "search": _search, "files": _files, "pull": _pull, "list": _list, "rm": _rm,
        }[args.command](args)
    except HubError as err:
        _fail(err)
        return EXIT_USAGE if err.code in ("BAD_REQUEST", "CONFIRM_REQUIRED") else EXIT_HUB_ERROR


def _fail(err: HubError) -> None:
    print(visible(f"error [{err.code}]: {err.message}"), file=sys.stderr)


def _table(rows: list[list[str]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if not rows:
        return
    rows = [[visible(c).replace("\n", "␤").replace("\t", "␉") for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _search(args: argparse.Namespace) -> int:
    results = search_models(args.query, args.fmt or "all", args.sort, args.limit)
    if not results:
        print("no models found", file=sys.stderr)
        return EXIT_OK
    rows = [["REPO", "FORMAT", "QUANT", "ARCH", "SIZE", "DOWNLOADS", "LIKES", "LICENSE",
             "GATED", "RUNS HERE"]]
    for r in results:
        rows.append([r.repo_id, r.format, r.quant or "-", r.architecture or "-",
                     human_bytes(r.size_bytes) if r.size_bytes else "-", str(r.downloads),
                     str(r.likes), r.license or "-", "yes" if r.gated else "no",
                     "yes" if r.runnable.ok else f"no: {r.runnable.reason}"])
    _table(rows)
    return EXIT_OK


def _files(args: argparse.Namespace) -> int:
    listing = list_files(args.repo, args.revision)
    rows = [["FILE", "SIZE", "QUANT", "ROLE", "WITH"]]
    for f in listing.files:
        role = f"refused: {f.unsafe}" if f.unsafe else (f.role or "-")
        rows.append([f.path, human_bytes(f.size), f.quant or "-", role, f.mmproj or "-"])
    _table(rows)
    print(visible(f"{listing.repo_id} @ {listing.revision[:12]} "
                  f"format={listing.format or 'unknown'}"), file=sys.stderr)
    return EXIT_OK


class _ProgressBar:
    """A one-line bar on stderr: redrawn in place on a terminal, a line per 10% otherwise."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out = out or sys.stderr
        self.tty = out.isatty()
        self._last_decile = -1
        self._last_draw = 0.0

    def __call__(self, p: DownloadProgress) -> None:
        if p.state in ("queued", "error", "cancelled"):
            return
        if p.stalled_s is not None and not self.tty:
            return  # a log file gets the error sentence if the stall ends the pull
        now = time.monotonic()
        decile = int(p.fraction * 10)
        if self.tty:
            if now - self._last_draw < 0.1 and p.state != "done":
                return
        elif decile == self._last_decile and p.state != "done":
            return
        self._last_draw, self._last_decile = now, decile
        width = 30
        filled = int(p.fraction * width)
        eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "--"
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {p.fraction * 100:5.1f}% "
                f"{human_bytes(p.downloaded)}/{human_bytes(p.total)} "
                f"{human_bytes(p.rate_bps)}/s ETA {eta} "
                f"({p.file_index + 1}/{p.file_count}) {visible(p.filename)}")
        if p.stalled_s is not None:
            line += f" · stalled: no data for {p.stalled_s:.0f} s"
        if self.tty:
            self.out.write("\r\x1b[2K" + line[:200])
            if p.state == "done":
                self.out.write("\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _pull(args: argparse.Namespace) -> int:
    cancel = CancelToken()
    bar = _ProgressBar()
    try:
        result = pull(args.repo, args.file, revision=args.revision, on_progress=bar,
                      cancel=cancel, include_mmproj=not args.no_mmproj)
    except KeyboardInterrupt:
        cancel.cancel()
        print("\ninterrupted; run the same pull again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if result.error is not None:
        if bar.tty:
            sys.stderr.write("\n")
        _fail(result.error)
        if result.error.code == "CANCELLED":
            return EXIT_INTERRUPTED
        return EXIT_USAGE if result.error.code == "BAD_REQUEST" else EXIT_HUB_ERROR
    print(visible(str(result.path)))
    print(f"downloaded {human_bytes(result.plan.total_bytes)} "
          f"({human_bytes(result.bytes_fetched)} over the network)", file=sys.stderr)
    ident = id_of(result.path, list_local_models(include_bundled=False))
    if ident:
        print(visible(id_line(ident)), file=sys.stderr)
    for name in result.unverified:
        print(visible(f"warning: the Hub gave no hash for {result.plan.repo_id}/{name}; it is "
                      "kept but unverified (`llmdeck models list` marks it)."), file=sys.stderr)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    rows = [["ID", "NAME", "FORMAT", "ENGINE", "QUANT", "ROLE", "SIZE", "SOURCE", "STATUS"]]
    for m in list_local_models():  # the one id the app, the API and F4 show (issue 45)
        rows.append([m.model_id or m.id, m.name, m.format, m.engine or "-", m.quant or "-", m.role,
                     human_bytes(m.size_bytes), m.source, _status(m)])
    _table(rows)
    return EXIT_OK


def _status(m: LocalModel) -> str:
    if not m.valid:
        return f"invalid: {m.problem}"
    return "ok" if m.verified else "ok, unverified (the Hub gave no hash)"


def _rm(args: argparse.Namespace) -> int:
    model = find_model(args.model)
    ident = model.model_id or model.id
    confirm = args.yes
    if not confirm:
        if not sys.stdin.isatty():
            raise HubError("CONFIRM_REQUIRED", f"Deleting {ident} needs confirmation; "
                           "pass --yes when not at a terminal.")
        answer = input(visible(f"Delete {ident} ({human_bytes(model.size_bytes)})? [y/N] "))
        confirm = answer.strip().lower() in ("y", "yes")
        if not confirm:
            print("kept", file=sys.stderr)
            return EXIT_USAGE
    freed = delete_model(model, confirm=confirm)
    print(visible(f"deleted {ident}, freed {human_bytes(freed)}"), file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
