"""The model hub screen: recommended models, search Hugging Face, pick a file, download it,
load a local model.

It opens on the recommended list (data in the package, so it shows offline): one key
downloads the model under the cursor and loads it when the download is done.

The searching, listing, fitting and deleting are the service's (runtime face calls, each
answered in a thread there) and so are the downloads (tui.hub_service_queue follows its
jobs): the screen only receives results and progress values. The screen is installed on
the app (see `open_hub`), so closing it keeps its rows and reopening it shows them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Input, Static, TabbedContent, TabPane

from core.wire.hub import DownloadProgress, HubError, LocalModel, Recommendation, plan_download
from core.wire.workers import WorkerStatus
from tui.hub_service_queue import ServiceDownloadQueue, ServiceJob
from tui.terminal_text import visible
from tui.widgets import hub_format as fmt
from tui.widgets.hub_confirm import ConfirmDialog
from tui.widgets.hub_downloads import DownloadsPanel
from tui.widgets.hub_files import FilesTable
from tui.widgets.hub_local import LocalTable
from tui.widgets.hub_recommended import RecommendedTable
from tui.widgets.hub_results import ResultsTable
from tui.widgets.quiet_footer import QuietFooter
from tui.widgets.worker_pane import loaded_lines

SCREEN_NAME = "hub"
LOADED_REFRESH_S = 2.0  # the Local tab's Loaded column while it shows
FORMATS = ("all", "gguf", "mlx")
SORTS = ("downloads", "likes", "recent")
RECOMMENDED_TAB = "hub-recommended-tab"
SEARCH_TAB = "hub-search-tab"
LOCAL_TAB = "hub-local-tab"
TABS = (RECOMMENDED_TAB, SEARCH_TAB, LOCAL_TAB)  # ctrl+t cycles through them in this order


def open_hub(app: App) -> None:
    """Show the hub, creating it once per app so its download queue outlives a close."""
    if not app.is_screen_installed(SCREEN_NAME):
        app.install_screen(HubScreen(), SCREEN_NAME)
    if app.screen is not app.get_screen(SCREEN_NAME):
        app.push_screen(SCREEN_NAME)


class HubScreen(Screen):
    """Recommended models; search, files and downloads; the local registry: three tabs."""

    # below 100 columns the download bars are short, so their numbers and state show
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("ctrl+t", "switch_tab", "Next tab"),
        Binding("slash", "focus_search", "Search"),
        Binding("ctrl+g", "cycle_format", "Format"),
        Binding("ctrl+r", "cycle_sort", "Sort"),
        Binding("c", "cancel_download", "Cancel download"),
        Binding("x", "clear_downloads", "Clear finished"),
    ]

    search_format: reactive[str] = reactive("all")
    search_sort: reactive[str] = reactive("downloads")

    def __init__(self, *, search_on_open: bool = True) -> None:
        super().__init__(id="hub-screen")
        self.queue: ServiceDownloadQueue | None = None  # the service's jobs
        self.query_text = ""
        self._search_on_open = search_on_open  # search when the search tab first shows
        self._searched = False
        self._load_when_done: set[str] = set()  # local ids to load once downloaded

    def compose(self) -> ComposeResult:
        yield Static("llmdeck │ Model hub", id="hub-title")
        with TabbedContent(id="hub-tabs", initial=RECOMMENDED_TAB):
            with TabPane("Recommended", id=RECOMMENDED_TAB):
                yield Static("", id="hub-rec-status", classes="hub-status", markup=False)
                yield RecommendedTable(id="hub-recommended")
                yield Static("", id="hub-rec-detail", markup=False)
            with TabPane("Search Hugging Face", id=SEARCH_TAB):
                with Horizontal(id="hub-search-row"):
                    yield Input(placeholder="model name, then Enter (empty = most popular)",
                                id="hub-query")
                    yield Static("", id="hub-filters", markup=False)
                yield Static("", id="hub-search-status", classes="hub-status", markup=False)
                yield ResultsTable(id="hub-results")
                yield Static("", id="hub-detail", markup=False)
                yield Static("Files: press Enter on a repo", id="hub-files-status",
                             classes="hub-status", markup=False)
                yield FilesTable(id="hub-files")
            with TabPane("Local models", id=LOCAL_TAB):
                yield Static("", id="hub-local-status", classes="hub-status", markup=False)
                yield LocalTable(id="hub-local")
                yield Static("", id="hub-local-loaded", markup=False)
        yield DownloadsPanel(id="hub-downloads")
        yield QuietFooter()

    def on_mount(self) -> None:
        # The service's jobs: they outlive this terminal (issue 45). The client's own
        # member (as tui.app reads `local`): the connection follows a reconnect.
        service = self.runtime
        self.queue = ServiceDownloadQueue(service.service_client,
                                          on_update=self._on_download_update)
        self.queue.start()
        self._show_filters()
        self.query_one(RecommendedTable).focus()
        self.refresh_recommended()
        self.refresh_local()
        self.set_interval(LOADED_REFRESH_S, self._refresh_loaded)

    # -- small helpers -----------------------------------------------------------------------
    @property
    def runtime(self) -> Any:
        """The app's runtime face (the service's client)."""
        return self.app.runtime  # type: ignore[attr-defined]

    def _status(self, selector: str, text: str, error: bool = False) -> None:
        """A status line: plain text (it quotes what was typed, file names, the Hub's words:
        read as markup, a search for "[/]" raised MarkupError), control characters shown."""
        widget = self.query_one(selector, Static)
        widget.update(visible(text))
        widget.set_class(error, "-error")

    def _show_error(self, selector: str, err: HubError) -> None:
        self._status(selector, f"{err.code}: {err.message}", error=True)

    def _show_filters(self) -> None:
        self.query_one("#hub-filters", Static).update(
            f"format {self.search_format} (ctrl+g) · sort {self.search_sort} (ctrl+r)")

    @property
    def on_local_tab(self) -> bool:
        return self.query_one(TabbedContent).active == LOCAL_TAB

    @property
    def on_search_tab(self) -> bool:
        return self.query_one(TabbedContent).active == SEARCH_TAB

    # -- recommended -----------------------------------------------------------------------
    @work(exclusive=True, group="hub-recommended")
    async def refresh_recommended(self) -> None:
        """The list, each row's fit at the configured context, and which are on disk."""
        context = self.runtime.settings.context_size
        try:
            recs, fits = await self.runtime.recommended_models(context)
            on_disk = {m.id for m in await self.runtime.local_models()}
            offline = await self.runtime.hub_offline()  # said first, not on the first `d`
        except HubError as err:
            self._show_error("#hub-rec-status", err)
            return
        except OSError as exc:
            self._status("#hub-rec-status", f"Cannot read the models folders: {exc}", True)
            return
        table = self.query_one(RecommendedTable)
        table.show(recs, fits, on_disk)
        kind = "MLX 4-bit" if recs and recs[0].format == "mlx" else "GGUF Q4_K_M"
        memory = fmt.size(fits[0].total_bytes) if fits else "?"
        fits_line = (f"For this machine: {kind} builds · fits = model + KV cache at {context} "
                     f"tokens, of {memory} memory")
        if offline:
            self._status("#hub-rec-status", f"OFFLINE: {offline}\n{fits_line}", error=True)
        else:
            self._status("#hub-rec-status", f"{fits_line} · d downloads and loads one")
        self._show_rec_detail(table.current)

    def _show_rec_detail(self, rec: Recommendation | None) -> None:
        text = "" if rec is None else (
            f"{rec.name} ({rec.family}): {rec.good_at}. {rec.repo}"
            f"{' · ' + rec.file if rec.file else ' (whole repo)'} · licence {rec.licence}")
        self.query_one("#hub-rec-detail", Static).update(visible(text))

    def on_data_table_row_highlighted(self, event) -> None:  # noqa: ANN001
        if isinstance(event.data_table, RecommendedTable):
            self._show_rec_detail(event.data_table.current)

    def on_recommended_table_get_requested(self, event: RecommendedTable.GetRequested) -> None:
        self.get_recommended(event.rec)

    @work(exclusive=True, group="hub-get")
    async def get_recommended(self, rec: Recommendation) -> None:
        """Load it when it is on disk; else queue its download and load it when done."""
        try:
            local = await self.runtime.local_models()
        except OSError as exc:
            self._status("#hub-rec-status", f"Cannot read the models folders: {exc}", True)
            return
        have = next((m for m in local if m.id == rec.local_id), None)
        if have is not None:
            self.load_model(have)
            return
        self._status("#hub-rec-status", f"Listing {rec.repo}…")
        try:
            listing = await self.runtime.hub_files(rec.repo)
            plan = plan_download(listing, rec.file)
        except HubError as err:
            self._show_error("#hub-rec-status", err)
            return
        assert self.queue is not None
        self._load_when_done.add(rec.local_id)
        if not any(j.plan == plan and not j.latest.finished for j in self.queue.jobs):
            self.queue.add(plan)
        self._status("#hub-rec-status", f"Downloading {rec.name} ({fmt.size(plan.total_bytes)}); "
                     "it loads when done · c cancels")
        self.refresh_bindings()

    @work(group="hub-load-after")
    async def load_downloaded(self, ident: str) -> None:
        models = await self.runtime.local_models()
        model = next((m for m in models if m.id == ident), None)
        if model is None:
            self._status("#hub-rec-status", f"{ident} downloaded but is not listed; see the "
                         "Local models tab.", error=True)
            return
        self.load_model(model)

    # -- search --------------------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        # `/` is the key that goes to the search box (README): pressed while the box
        # already has the focus, it is that key, not the start of the query
        if event.input.id == "hub-query" and event.value == "/":
            event.input.value = ""

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "hub-query":
            event.stop()
            self.query_text = event.value.strip()
            self.run_search(focus_results=True)

    @work(exclusive=True, group="hub-search")
    async def run_search(self, focus_results: bool = False) -> None:
        what = f"“{self.query_text}”" if self.query_text else "the most popular models"
        self._status("#hub-search-status", f"Searching {what} ({self.search_format}, by "
                     f"{self.search_sort})…")
        try:
            results = await self.runtime.hub_search(self.query_text, self.search_format,
                                                    self.search_sort)
        except HubError as err:
            self.query_one(ResultsTable).show([])
            self.query_one("#hub-detail", Static).update("")
            self._show_error("#hub-search-status", err)
            return
        table = self.query_one(ResultsTable)
        table.show(results)
        # the cursor may stay on row 0 without a highlight event: describe the new row 0
        current = table.current
        self.query_one("#hub-detail", Static).update(
            visible(fmt.result_detail(current)) if current else "")
        if not results:
            kind = {"gguf": "GGUF ", "mlx": "MLX "}.get(self.search_format, "")
            self._status("#hub-search-status", f"No {kind}repos match {what}; "
                         "try fewer words or ctrl+g for another format.")
            return
        n = len(results)
        self._status("#hub-search-status",
                     f"{n} repo{'' if n == 1 else 's'} · Enter lists a repo's files")
        if focus_results:
            table.focus()

    def on_results_table_highlighted(self, event: ResultsTable.Highlighted) -> None:
        self.query_one("#hub-detail", Static).update(visible(fmt.result_detail(event.result)))

    def on_results_table_opened(self, event: ResultsTable.Opened) -> None:
        self.open_repo(event.result.repo_id)

    @work(exclusive=True, group="hub-files")
    async def open_repo(self, repo_id: str) -> None:
        files = self.query_one(FilesTable)
        self._status("#hub-files-status", f"Listing {repo_id}…")
        try:
            listing = await self.runtime.hub_files(repo_id)
        except HubError as err:
            files.show_empty()
            self._show_error("#hub-files-status", err)
            return
        files.show(listing)
        what = {"gguf": "d downloads the GGUF under the cursor (its mmproj comes along)",
                "mlx": "MLX model: d downloads the files it needs",
                None: "nothing here llmdeck can run"}[listing.format]
        gated = " · gated: accept its terms on the Hub first" if listing.gated else ""
        self._status("#hub-files-status", f"{repo_id} · {len(listing.files)} files · "
                     f"{what}{gated}")
        files.focus()

    # -- downloads ----------------------------------------------------------------------------
    def on_files_table_download_requested(self, event: FilesTable.DownloadRequested) -> None:
        try:
            plan = plan_download(event.listing, None if event.listing.format == "mlx"
                                 else event.file.path)
        except HubError as err:
            self._show_error("#hub-files-status", err)
            return
        assert self.queue is not None
        for job in self.queue.jobs:
            if job.plan == plan and not job.latest.finished:
                self._status("#hub-files-status", f"{plan.primary or plan.repo_id} is already "
                             "in the download queue.")
                return
        self.queue.add(plan)
        name = plan.primary or plan.repo_id
        self._status("#hub-files-status", f"Queued {name} ({fmt.size(plan.total_bytes)}, "
                     f"{len(plan.files)} file{'s' if len(plan.files) > 1 else ''}) · "
                     "c cancels")
        self.refresh_bindings()

    def _on_download_update(self, job: ServiceJob, progress: DownloadProgress) -> None:
        before = self.query_one(DownloadsPanel).rows.get(job)
        old_state = before.progress.state if before is not None else None
        self.query_one(DownloadsPanel).show_progress(
            job, progress, fmt.job_title(job.plan.repo_id, job.plan.primary))
        if progress.state != old_state:
            self.refresh_bindings()
        if progress.state == "done" and old_state != "done":
            ident = f"{job.plan.repo_id}:{job.plan.primary}" if job.plan.primary \
                else job.plan.repo_id
            self.refresh_local(select=ident)
            self.refresh_recommended()
            if ident in self._load_when_done:
                self._load_when_done.discard(ident)
                self.load_downloaded(ident)
            elif before is not None:  # seen running here; not one that ended before it opened
                self.tell_ready(ident, job.plan.primary or job.plan.repo_id,
                                bool(progress.unverified))

    @work(group="hub-ready")
    async def tell_ready(self, ident: str, fallback: str, unverified: bool) -> None:
        """"Download finished", naming the model by its one id (issue 45, item 2: the
        header, F4, the picker and the API's), not by its file."""
        try:
            found = next((m for m in await self.runtime.local_models() if m.id == ident), None)
        except OSError:
            found = None
        name = (found.model_id or found.name) if found is not None else fallback
        note = " (unverified: the Hub gave no hash)" if unverified else ""
        self.notify(visible(f"{name} is ready{note}; on the Local models tab (ctrl+t) l loads "
                            "it."), title="Download finished", markup=False)

    def action_cancel_download(self) -> None:
        assert self.queue is not None
        job = self._cancellable()
        if job is not None:
            self.queue.cancel(job)

    def _cancellable(self) -> ServiceJob | None:
        if self.queue is None:
            return None
        if (active := self.queue.active) is not None:
            return active
        return next((j for j in self.queue.jobs if not j.latest.finished), None)

    def action_clear_downloads(self) -> None:
        self.query_one(DownloadsPanel).clear_finished()
        self.refresh_bindings()

    # -- local models -------------------------------------------------------------------------
    @work(exclusive=True, group="hub-local")
    async def refresh_local(self, select: str | None = None) -> None:
        try:
            models = await self.runtime.local_models()
        except OSError as exc:
            self._status("#hub-local-status", f"Cannot read the models folders: {exc}", True)
            return
        self.show_loaded(models, select=select)
        count = f"{len(models)} model" + ("" if len(models) == 1 else "s")
        self._status("#hub-local-status", f"{count} on this machine · l loads "
                     "one into the chat · Delete removes its files")

    def _workers(self) -> list[WorkerStatus]:
        runtime = getattr(self.app, "runtime", None)
        try:
            return list(runtime.worker_status()) if runtime is not None else []
        except Exception:  # noqa: BLE001 - the pool is shutting down: show nothing loaded
            return []

    def _refresh_loaded(self) -> None:
        """Loaded models come and go, and their last use and time left age."""
        if self.app.screen is self and self.on_local_tab:  # not under a dialog
            self.show_loaded(self.query_one(LocalTable).models)

    def show_loaded(self, models: list[LocalModel], workers: list[WorkerStatus] | None = None,
                    select: str | None = None) -> None:
        """The table's Loaded column, and one line per loaded model under it (memory,
        last use, when it unloads if left idle), as F4 shows them."""
        workers = self._workers() if workers is None else workers
        self.query_one(LocalTable).show(models, select=select, loaded=workers, uses=self._uses())
        lines = loaded_lines(workers)
        self.query_one("#hub-local-loaded", Static).update(
            Group(Text("Loaded now:", style="bold"), *lines) if lines else "")

    def _uses(self) -> dict[Path, str]:
        """Which local models have a role in the settings (shown in the Role column)."""
        runtime = getattr(self.app, "runtime", None)
        out: dict[Path, str] = {}
        for setting, word in (("vision_model", "vision model"), ("draft_model", "draft model")):
            value = getattr(runtime.settings, setting, None) if runtime is not None else None
            if value:
                path = Path(value).expanduser()
                out[path] = f"{out[path]}, {word}" if path in out else word
        return out

    def on_local_table_use_requested(self, event: LocalTable.UseRequested) -> None:
        self.use_model(event.model, event.role)

    @work(exclusive=True, group="hub-use")
    async def use_model(self, model: LocalModel, role: str) -> None:
        """Set (or, on the model already set, clear) the vision or draft model and save it.
        The vision model takes effect at the next image; the draft model when the chat
        model next loads (l on it loads it again, beside the running one)."""
        runtime = getattr(self.app, "runtime", None)
        if runtime is None:
            return
        setting = "vision_model" if role == "vision" else "draft_model"
        what = "vision model" if role == "vision" else "draft model"
        current = getattr(runtime.settings, setting, None)
        if current and Path(current).expanduser() == model.path:
            setattr(runtime.settings, setting, None)
            message = f"{model.name} is no longer the {what}."
        else:
            problem = _use_problem(model, role)
            if problem is not None:
                self._status("#hub-local-status", problem, error=True)
                return
            setattr(runtime.settings, setting, str(model.path))
            message = (f"{model.name} is the vision model: it describes images for text models."
                       if role == "vision" else
                       f"{model.name} is the draft model: it guesses tokens for an MLX chat "
                       "model of its family from its next load (l on the chat model loads it "
                       "again).")
        try:
            await runtime.save_settings()
        except OSError as exc:
            self._status("#hub-local-status", f"Could not save the settings: {exc}", True)
            return
        self._status("#hub-local-status", message)
        self.show_loaded(self.query_one(LocalTable).models)

    def on_local_table_refresh_requested(self, _: LocalTable.RefreshRequested) -> None:
        self.refresh_local()

    def on_local_table_load_requested(self, event: LocalTable.LoadRequested) -> None:
        self.load_model(event.model)

    @work(exclusive=True, group="hub-load")
    async def load_model(self, model: LocalModel) -> None:
        if not model.valid:
            self._status("#hub-local-status", f"{model.name} cannot be loaded: {model.problem}. "
                         "Delete it and download it again.", error=True)
            return
        # The app owns the load, so closing this screen does not cancel it; the service
        # unpacks the bundled model first.
        switch = (self.runtime.switch_model(str(model.path), bundled=True)
                  if model.source == "bundled" else self.runtime.switch_model(str(model.path)))
        self.app.run_worker(switch, name="switch-model", group="model-switch", exclusive=True)
        self.notify(visible(f"Loading {model.name}…"), title="Model", markup=False)
        self.action_close()

    def on_local_table_delete_requested(self, event: LocalTable.DeleteRequested) -> None:
        model = event.model
        loaded = getattr(self.app, "runtime", None)
        current = loaded.settings.model if loaded is not None else None
        if current and Path(current).expanduser() == model.path:
            self._status("#hub-local-status", f"{model.name} is the model in use; load another "
                         "one first, then delete it.", error=True)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.remove_model(model)

        self.app.push_screen(
            ConfirmDialog(f"Delete {model.model_id or model.name}?", _delete_detail(model)),
            answered,
        )

    @work(group="hub-delete")
    async def remove_model(self, model: LocalModel) -> None:
        try:
            freed = await self.runtime.delete_local_model(model.id)
        except HubError as err:
            self._show_error("#hub-local-status", err)
            return
        except OSError as exc:
            self._status("#hub-local-status", f"Could not delete {model.name}: {exc}", True)
            return
        self.refresh_local()
        self.notify(visible(f"Deleted {model.name}, freed {fmt.size(freed)}."), title="Model",
                    markup=False)

    # -- keys ------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("cycle_format", "cycle_sort"):
            return self.on_search_tab
        if action == "cancel_download":
            return self._cancellable() is not None
        if action == "clear_downloads":
            return self.query_one(DownloadsPanel).has_finished
        return True

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_bindings()
        if event.pane.id == LOCAL_TAB:
            self.query_one(LocalTable).focus()
        elif event.pane.id == RECOMMENDED_TAB:
            self.query_one(RecommendedTable).focus()
        elif event.pane.id == SEARCH_TAB:
            self._first_search()

    def _first_search(self) -> None:
        """The search tab's first showing: the most popular repos, the search box focused."""
        if self._searched:
            return
        self._searched = True
        self.query_one("#hub-query", Input).focus()
        if self._search_on_open:
            self.run_search()

    def action_switch_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = TABS[(TABS.index(tabs.active) + 1) % len(TABS)]
        if tabs.active == SEARCH_TAB and self._searched:
            self.query_one(ResultsTable).focus()

    def action_focus_search(self) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active != SEARCH_TAB:
            tabs.active = SEARCH_TAB
            self._first_search()
        self.query_one("#hub-query", Input).focus()

    def action_cycle_format(self) -> None:
        self.search_format = FORMATS[(FORMATS.index(self.search_format) + 1) % len(FORMATS)]
        self._show_filters()
        self.run_search()

    def action_cycle_sort(self) -> None:
        self.search_sort = SORTS[(SORTS.index(self.search_sort) + 1) % len(SORTS)]
        self._show_filters()
        self.run_search()

    def action_close(self) -> None:
        """Back to the chat; but while a download is stalled, Esc first cancels that one
        (the key a person reaches for when something hangs; downloads that are moving
        keep going behind the chat)."""
        if (job := self._stalled()) is not None:
            assert self.queue is not None
            self.queue.cancel(job)
            return
        if self.app.screen is self:
            self.app.pop_screen()

    def _stalled(self) -> ServiceJob | None:
        job = self.queue.active if self.queue is not None else None
        row = self.query_one(DownloadsPanel).rows.get(job) if job is not None else None
        if row is not None and row.progress.stalled_s is not None and not row.progress.finished:
            return job
        return None


def _delete_detail(model: LocalModel) -> str:
    where = {"hf-cache": "the Hugging Face cache", "models-dir": "the models folder"}.get(
        model.source, model.source)
    extra = " and its vision projector" if model.mmproj else ""
    return f"Frees {fmt.size(model.size_bytes)}: removes the file{extra} from {where}."


def _use_problem(model: LocalModel, role: str) -> str | None:
    """Why `model` cannot take the role, as a sentence, or None."""
    if not model.valid:
        return f"{model.name} cannot be used: {model.problem}."
    if model.format != "mlx":
        if role == "vision":
            return (f"{model.name} is a GGUF: the vision model must be an MLX vision folder "
                    "(mlx-vlm). A GGUF with its projector answers images itself when loaded "
                    "as the chat model (l).")
        return (f"{model.name} is a GGUF: a draft model must be an MLX folder of the chat "
                "model's family (llama.cpp runs no draft model here).")
    return None
