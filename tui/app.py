"""The llmdeck Textual app: owns the Runtime and the screens."""

from __future__ import annotations

import asyncio
import sys
from time import monotonic
from typing import TYPE_CHECKING

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel

from core import paths
from core.config import kept_notice
from core.runtime import ModelState
from core.wire.store import StoreError
from themes import stylesheets
from themes.palettes import THEME_NAMES, THEMES
from tui import gc_tuning, warmup
from tui.commands import AppCommands, ModelCommands
from tui.key_order import InputOrder
from tui.screens.main import MainScreen
from tui.service_runtime import ServiceRuntime
from tui.terminal_text import visible

if TYPE_CHECKING:
    from core.runtime import Runtime

REJOIN_EVERY_S = 1.0  # a stopped app looks this often for a service someone else started
QUIT_QUESTION = ("A reply is still streaming; quitting stops it here (what arrived is kept). "
                 "Quit anyway?")
QUIT_NOTE = ("llmdeck: the reply that was streaming goes on in the engine service; run "
             "llmdeck again to see it (Esc there stops it).")


class LlmdeckApp(App):
    """Keyboard-first chat with local models."""

    TITLE = "llmdeck"
    CSS_PATH = stylesheets()
    ENABLE_COMMAND_PALETTE = True
    COMMANDS = App.COMMANDS | {AppCommands, ModelCommands}
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f2", "next_theme", "Theme", show=False),
        Binding("ctrl+o", "open_hub", "Models"),
        Binding("f10", "start_service", "Start the service", show=False),
    ]

    def __init__(self, runtime: Runtime | ServiceRuntime | None = None, *,
                 preload: bool = True) -> None:
        super().__init__()
        # Always the engine service's client (issue 42, one path): of this home's service
        # (`llmdeck`), or of a Runtime this process owns (`--in-process`, the tests),
        # served here over a socket pair with the same codec (core.service.loopback).
        if runtime is None:  # loaded here: the service's client never needs it
            from core.runtime import Runtime

            runtime = Runtime()
        if not isinstance(runtime, ServiceRuntime):
            runtime = ServiceRuntime(local=runtime)
        self.runtime: ServiceRuntime = runtime
        self._preload = preload
        self.runtime.open_store_soon()  # read while Textual starts: the first frame lists it
        for theme in THEMES:
            self.register_theme(theme)
        wanted = self.runtime.settings.theme
        self._theme_before_css = True  # see refresh_css
        self.theme = wanted if wanted in THEME_NAMES else THEME_NAMES[0]

    def refresh_css(self, animate: bool = True) -> None:
        """Setting the theme above queues a CSS refresh, which runs before any stylesheet
        was read or any screen exists: new variables are all that needs (the full refresh
        parsed every stylesheet once for it, and once more for the first screen, ~10 ms)."""
        if self._theme_before_css and not self.screen_stack:
            self._theme_before_css = False
            self.stylesheet.set_variables(self.get_css_variables())
            return
        self._theme_before_css = False
        super().refresh_css(animate)

    last_input_at = float("-inf")
    """When the last key or paste arrived (time.monotonic): streamed text waits one frame
    after it, so a keystroke is painted without a chat relayout in front of it."""

    _input_order: InputOrder | None = None

    @property
    def input_order(self) -> InputOrder:
        """Where raw keys and pastes queue up, to be handled strictly in arrival order."""
        if self._input_order is None:
            self._input_order = InputOrder(self, super().on_event)
        return self._input_order

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.Paste)):
            self.last_input_at = monotonic()
            if not event.is_forwarded:  # straight from the terminal: in order (tui.key_order)
                await self.input_order.feed(event)
                return
        await super().on_event(event)

    def on_mount(self) -> None:
        self.main = MainScreen()
        self.push_screen(self.main)
        self.runtime.listen_model(self._on_model_state)
        service = self.runtime  # the service's client: its own listeners
        service.lost_listeners.append(self._on_service_lost)
        service.live_listeners.append(self.main.on_live_reply)
        service.notice_listeners.append(self._on_service_notice)
        service.conversation_listeners.append(self._on_conversations_changed)
        self.run_worker(self.start_runtime(), name="runtime-start", exclusive=True)

    def _on_model_state(self, state: ModelState) -> None:
        try:
            self.main.on_model_state(state)
        except NoMatches:  # a reload that ended as the app closes: its widgets are gone
            pass

    async def start_runtime(self) -> None:
        await self._tell_settings_problems()
        # A damaged database takes seconds to recover on a long history: say so meanwhile.
        watch = self.set_interval(0.2, self._tell_if_recovering)
        try:
            await self.runtime.start(preload=False)
        except Exception as exc:  # e.g. a database from a newer llmdeck
            self.notify(str(exc), title="Cannot open history", severity="error", timeout=30)
            gc_tuning.settle_after_start()  # up as far as it gets: full collections again
            await self.main.opened_at_start()
            return
        finally:
            watch.stop()
        notice = self.runtime.store_notice  # a damaged database was moved aside
        if notice:
            self.notify(notice, title="History", severity="warning", timeout=60)
        if notice or not self.main.history_listed:  # else on_mount listed the early read
            await self.main.refresh_sidebar()
        self.main.on_model_state(self.runtime.model_state())
        await self._open_live_reply()
        await self.main.opened_at_start()
        # Preload and warm up once the first frame (history listed) is on screen: starting
        # a worker process or importing in a thread competes with painting it.
        painted = asyncio.Event()
        self.call_after_refresh(painted.set)
        await painted.wait()
        if self._preload:
            self.run_worker(self.runtime.ensure_model(), name="model-preload", exit_on_error=False)
        await asyncio.to_thread(warmup.warm_imports, warmup.CLIENT_MODULES)
        gc_tuning.settle_after_start()

    async def _open_live_reply(self) -> None:
        """The conversation of the newest reply the service streams or just finished (its
        terminal went away mid-reply, say) opens at start, streaming on when it still is."""
        recent = sorted(await self.runtime.live_turns(), key=lambda t: t.get("started_at", 0))
        if recent and self.main.conversation_id is None and not self.main.busy:
            await self.main.open_conversation(recent[-1]["conversation_id"])

    def _on_service_notice(self, notice: dict) -> None:
        """A notice of the service (core.service.notices): a database moved aside, a model
        loaded or unloaded, a download finished; said in every open app."""
        severity = notice.get("severity")
        severity = severity if severity in ("information", "warning", "error") else "information"
        self.notify(str(notice.get("message")), title=str(notice.get("title") or "Service"),
                    severity=severity, timeout=60 if severity != "information" else 5)

    def _on_conversations_changed(self) -> None:
        """Another client (or this one) made, renamed, deleted or wrote to a conversation:
        the sidebar lists again (pushed by the service, a burst gives one listing)."""
        if getattr(self, "main", None) is not None and self.main.history_listed:
            self.run_worker(self._list_again(), name="sidebar-push", group="sidebar-push",
                            exclusive=True, exit_on_error=False)

    async def _list_again(self) -> None:
        await asyncio.sleep(0.05)  # a burst of changes (a reply's start) lists once
        try:
            await self.main.refresh_sidebar()
        except NoMatches:  # the app is closing
            pass

    def _on_service_lost(self, sentence: str) -> None:
        service = self.runtime
        how = service.lost_how
        if how == "stopped":  # said with its key; nothing starts behind the person's back
            self.notify(service.stopped or sentence, title="Service", severity="warning",
                        timeout=600)
            self.run_worker(self._rejoin_when_started(), name="service-rejoin",
                            group="service", exclusive=True, exit_on_error=False)
            return
        if how == "restarting":
            self.notify("The llmdeck service is restarting…", title="Service", timeout=5)
        else:
            self.notify(f"{sentence} Starting a new llmdeck service…", title="Service",
                        severity="warning", timeout=10)
        self.run_worker(self._reconnect(start=how != "restarting"), name="service-reconnect",
                        group="service", exclusive=True, exit_on_error=False)

    def action_start_service(self) -> None:
        """F10: start the service that was stopped, and attach to it."""
        service = self.runtime  # the client's own member, as in _on_lost
        if service.connected:
            return
        self.notify("Starting the llmdeck service…", title="Service", timeout=4)
        self.run_worker(self._reconnect(), name="service-reconnect", group="service",
                        exclusive=True, exit_on_error=False)

    async def _rejoin_when_started(self) -> None:
        """While the service is stopped, look for one each REJOIN_EVERY_S and attach when
        another window's F10, `llmdeck service start` or a `serve` brought it: this window
        no longer says "stopped, press F10" beside a running service. It starts none (F10,
        in the same worker group, takes over from this watch)."""
        service = self.runtime
        while service.stopped is not None:
            await asyncio.sleep(REJOIN_EVERY_S)
            if await service.rejoin():
                await self._attached_again()
                return

    async def _reconnect(self, start: bool = True) -> None:
        """Attach to a new service (started here unless a restart brings one), then show
        the open conversation as the store has it (a reply the crash cut is stored as
        stopped with what arrived)."""
        service = self.runtime
        try:
            await service.reconnect(start=start)
        except Exception as exc:  # noqa: BLE001 - said, and the app stays up to quit
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            service.stopped = (f"Could not reach the llmdeck service: {message} Press F10 to "
                               "try again.")
            self.notify(service.stopped, title="Service", severity="error", timeout=60)
            return
        await self._attached_again()

    async def _attached_again(self) -> None:
        """Say so, and show the model, the sidebar and the open conversation afresh."""
        self._clear_service_notices()  # "stopped, press F10" is no longer true
        self.notify("Connected to the llmdeck service.", title="Service", timeout=4)
        self.main.on_model_state(self.runtime.model_state())
        await self.main.refresh_sidebar()
        if self.main.conversation_id is not None and not self.main.busy:
            await self.main.open_conversation(self.main.conversation_id)

    def _clear_service_notices(self) -> None:
        """Take down what was said about the service going (the stopped notice stays ten
        minutes, and would still ask for F10 after it)."""
        for notice in [n for n in self._notifications if n.title == "Service"]:
            self._unnotify(notice, refresh=False)
        self._refresh_notifications()

    _told_recovering = False

    def _tell_if_recovering(self) -> None:
        if self.runtime.store_recovering and not self._told_recovering:
            self._told_recovering = True
            self.notify("The conversation database is damaged: llmdeck is moving it aside and "
                        "copying what can still be read into a new one (seconds for a long "
                        "history)…", title="History", severity="warning", timeout=30)

    def action_open_hub(self) -> None:
        """The model hub: search, download, load (tui/screens/hub.py)."""
        from tui.screens.hub import open_hub

        open_hub(self)

    def get_system_commands(self, screen):  # noqa: ANN001, ANN201  (Textual's signature)
        yield from super().get_system_commands(screen)
        from textual.app import SystemCommand

        yield SystemCommand("Models", "Search, download and load models (ctrl+o)",
                            self.action_open_hub)

    def action_next_theme(self) -> None:
        names = list(THEME_NAMES)
        self.set_theme(names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0])

    def set_theme(self, name: str) -> None:
        """Switch the theme live and remember it in the config file (written off the loop)."""
        self.theme = name
        self.runtime.settings.theme = name
        self.notify(f"Theme: {name.removeprefix('llmdeck-')}", timeout=2)
        self.run_worker(self.save_settings_or_warn(), group="settings-save")

    def use_model(self, choice) -> None:  # noqa: ANN001  (tui.screens.model_picker.ModelChoice)
        """Load a picked model for this and later chats (remembered per conversation)."""
        self.run_worker(self._use_model(choice), group="model", exclusive=True)

    async def _use_model(self, choice) -> None:  # noqa: ANN001
        main = self.main
        if main.busy:
            self.notify("A reply is still streaming; press Esc to stop it first.")
            return
        # Its own preset into the service's settings before it loads (issue 31, item 4).
        preset = await self.runtime.apply_preset(choice.path, choice.name)
        self.notify(f"Loading {choice.name}…" + (f" (preset {preset[0]})" if preset else ""),
                    timeout=3)
        try:  # the bundled model is unpacked by the service first
            ok = await self.runtime.switch_model(choice.path, choice.engine, choice.bundled)
        except OSError as exc:  # a full or read-only disk: the current model stays
            self.notify(getattr(exc, "message", None) or str(exc), title="Model",
                        severity="error", timeout=15)
            return
        if ok:
            await self.save_settings_or_warn()
            if main.conversation_id is not None:
                try:
                    await self.runtime.remember_model(main.conversation_id)
                except StoreError as exc:  # a full disk: the model is loaded all the same
                    self.notify(exc.message, title="History", severity="warning", timeout=10)
            self.notify(f"Model ready: {self.runtime.model_state().label}", timeout=3)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notice is plain text: they quote paths, model names and remote servers'
        words, where "[/]" read as markup raised MarkupError and an escape sequence reached
        the terminal (tui.terminal_text). No notice of ours uses markup."""
        super().notify(visible(message), title=visible(title), severity=severity,
                       timeout=timeout, markup=False)

    async def save_settings_or_warn(self) -> None:
        """Save settings; a full or read-only disk is a notice, not a crash."""
        try:
            kept = await self.runtime.save_settings()
        except OSError as exc:
            self.notify(f"Could not save the settings ({exc.strerror or exc}); they apply until "
                        "llmdeck quits.", title="Settings", severity="warning", timeout=10)
            return
        if kept is not None:
            self.notify(kept_notice(kept), title="Settings", severity="warning", timeout=20)

    async def _tell_settings_problems(self) -> None:
        """What the config file held that llmdeck could not use (defaults stand in)."""
        problems = self.runtime.settings.problems
        if not problems:
            return
        where = await asyncio.to_thread(paths.config_path)  # it makes the folder: off the loop
        shown = "\n".join(f"• {p}" for p in problems[:4])
        more = f"\n…and {len(problems) - 4} more (llmdeck doctor lists them)" if len(problems) > 4 else ""
        self.notify(f"{shown}{more}\nFix {where}, or save from Settings (F3): "
                    "the old file is kept.", title="Settings", severity="warning", timeout=30)

    def use_conversation_model(self, conversation_id: str) -> None:
        """Opening a conversation selects the model it was having (see core.model_refs)."""
        self.run_worker(self._use_conversation_model(conversation_id), group="model",
                        exclusive=True)

    async def _use_conversation_model(self, conversation_id: str) -> None:
        from core.wire import model_refs

        runtime = self.runtime
        conversation = await runtime.conversation(conversation_id)
        ref = conversation.model if conversation is not None else None
        if not ref or runtime.is_active_model(ref):
            return
        found = await runtime.find_model(ref)
        if found is None:
            self.notify(f"This conversation used {model_refs.display(ref)}, which is no longer "
                        f"available here; keeping {runtime.model_state().label}. Pick another with F5.",
                        title="Model", severity="warning", timeout=8)
            return
        if self.main.busy or self.main.conversation_id != conversation_id:
            return  # a reply started, or another conversation opened, meanwhile
        model, engine = found
        self.notify(f"Loading {model_refs.display(ref)} for this conversation…", timeout=3)
        if await runtime.switch_model(model, engine):
            await self.save_settings_or_warn()

    def use_model_named(self, name: str) -> None:
        """`/model NAME`: load the one local model whose name contains NAME."""
        self.run_worker(self._use_model_named(name), group="model", exclusive=True)

    async def _use_model_named(self, name: str) -> None:
        from tui.screens.model_picker import load_choices

        choices, _ = await load_choices(self.runtime)
        found = [c for c in choices if name.lower() in c.name.lower() or name == c.id]
        if len(found) != 1:
            names = ", ".join(c.name for c in choices) or "none"
            what = "matches several models" if found else "matches no local model"
            self.notify(f"{name!r} {what}. Local models: {names}.", severity="warning", timeout=8)
            return
        await self._use_model(found[0])

    def _handle_exception(self, error: Exception) -> None:
        """A worker that failed on an answer of the service (an error the app did not
        word, the service gone mid-call) is a notice with the service's sentence, never the
        end of the app (Textual's default for a failed worker). Anything else is a bug."""
        from textual.worker import WorkerFailed

        cause = error.error if isinstance(error, WorkerFailed) else None
        service = sys.modules.get("core.service.client")
        if cause is not None and service is not None and isinstance(
                cause, (service.ServiceCallError, service.ServiceUnavailable)):
            said = getattr(cause, "message", None) or str(cause)
            if not any(n.title == "Service" and n.message == said for n in self._notifications):
                # (a reply cut by `service stop` fails with the sentence the stop said)
                self.notify(said, title="Service", severity="error", timeout=15)
            return
        super()._handle_exception(error)

    async def action_quit(self) -> None:
        """Quit. A reply still streaming: as the service's client it goes on in the service,
        and the terminal says so as the app leaves; in process it would be cut, so a yes is
        asked first (README: Dialogs, "quit while a reply streams")."""
        streaming = self.main.busy or self.main.live.attaching
        service = self.runtime  # the client's own member, as in _on_lost
        elsewhere = service.local is None  # a service in this process ends with the app
        if streaming and not elsewhere:
            from tui.screens.dialogs import ConfirmScreen

            if not isinstance(self.screen, ConfirmScreen):
                self.push_screen(ConfirmScreen(QUIT_QUESTION, "Quit"), self._quit_if)
            return
        if streaming:  # the app's workers end first, then on_unmount leaves the service:
            self.exit(message=QUIT_NOTE)  # closing now would fail the reply's worker
            return
        await self.runtime.close()
        self.exit()

    def _quit_if(self, yes: bool | None) -> None:
        if yes:  # the reply's worker ends first; on_unmount closes the runtime (the store
            self.exit()  # keeps the reply as stopped, with what arrived)

    async def on_unmount(self) -> None:
        if self._input_order is not None:
            self._input_order.close()
        await self.runtime.close()  # idempotent; covers exits that skip action_quit
        gc_tuning.restore()
