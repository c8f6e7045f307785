"""Test inference: run the selected environment against inference models; results per model as they arrive."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, RichLog, Static
from textual.worker import Worker, WorkerState

from .. import backend
from ..format import error_line, number

COLUMNS = ("model", "status", "groups", "completions", "correct", "accuracy", "mean score", "time (s)", "errors")


class InferenceScreen(Screen):
    BINDINGS = [
        Binding("escape", "close", "Back", id="inference.close"),
        Binding("ctrl+r", "run_test", "Run test", id="inference.run"),
        Binding("ctrl+c", "cancel", "Cancel test", id="inference.cancel"),
    ]

    def __init__(self, environment: str | None, run_id: str | None = None):
        super().__init__()
        self.environment = environment
        self.run_id = run_id  # the selected run: what the checkpoint field suggests
        self.test: backend.InferenceTrial | None = None
        self.models: dict[str, dict] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="inference-box"):
            yield Static(
                Text.assemble(
                    ("Test inference", "bold"),
                    f"  environment {self.environment or '(none selected)'}"
                    "  · without models: OpenRouter with OPENROUTER_API_KEY, "
                    "else a running local run's model; a checkpoint (RUN or RUN@STEP): that saved "
                    "checkpoint of any run, on the run's environment",
                ),
                id="inference-title",
            )
            with Horizontal(id="inference-form"):
                yield Label("steps")
                yield Input("3", id="inf-steps", compact=True, type="integer")
                yield Label("group size")
                yield Input("4", id="inf-group", compact=True, type="integer")
                yield Label("models")
                yield Input("", id="inf-models", compact=True, placeholder="comma separated (optional)")
                yield Label("base url")
                yield Input("", id="inf-url", compact=True, placeholder="OpenAI-compatible (optional)")
                yield Label("checkpoint")
                hint = f"{self.run_id}@STEP (optional)" if self.run_id else "RUN@STEP (optional)"
                yield Input("", id="inf-checkpoint", compact=True, placeholder=hint)
            table: DataTable[str] = DataTable(id="inf-table", cursor_type="row")
            for label in COLUMNS:
                table.add_column(label, key=label)
            yield table
            yield RichLog(id="inf-log", max_lines=500, wrap=True, markup=False)
        yield Footer()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_run_test()

    def action_close(self) -> None:
        if self.test is not None:
            self.test.cancel()
        self.dismiss()

    def action_cancel(self) -> None:
        if self.test is not None:
            self.test.cancel()

    def action_run_test(self) -> None:
        if self.test is not None:
            self.notify("a test is already running (ctrl+c cancels it)")
            return
        models = [m.strip() for m in self.query_one("#inf-models", Input).value.split(",") if m.strip()] or None
        url = self.query_one("#inf-url", Input).value.strip() or None
        checkpoint = self.query_one("#inf-checkpoint", Input).value.strip() or None
        try:
            steps = int(self.query_one("#inf-steps", Input).value or 3)
            group = int(self.query_one("#inf-group", Input).value or 4)
        except ValueError:
            self.notify("steps and group size must be whole numbers", severity="error")
            return
        self.query_one(DataTable).clear()
        self.models.clear()
        self._run(steps, group, models, url, checkpoint)

    @work(thread=True, exclusive=True, group="inference", exit_on_error=False, description="test inference failed")
    def _run(self, steps: int, group: int, models, url, checkpoint: str | None = None) -> None:
        try:
            # A checkpoint is tested on its own run's environment (None), else on the selected one.
            environment = None if checkpoint else self.environment
            self.test = test = backend.prepare_inference_test(environment, steps, group, models, url, checkpoint)
            for event in test.events():
                self.app.call_from_thread(self.on_test_event, event)
        finally:
            self.test = None

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A test that cannot run says why in the screen's log, next to the results (not as a toast)."""
        if event.worker.group == "inference" and event.state is WorkerState.ERROR:
            event.stop()
            self.query_one(RichLog).write(Text(f"✖ {error_line(event.worker.error)}", style="red"))

    def on_test_event(self, event: dict) -> None:
        kind = event.get("event")
        log = self.query_one(RichLog)
        table = self.query_one(DataTable)
        model = event.get("model")
        if kind == "started":
            target = event.get("target") or {}
            tested = target.get("note") or f"models {', '.join(target.get('models') or [])}"
            log.write(
                f"test {event.get('test_id')} → {target.get('kind')} {target.get('base_url')}: {tested}; "
                f"files in {event.get('folder')}"
            )
            for name in target.get("models") or []:
                self.models[name] = {"status": "waiting"}
                own_policy = target.get("kind") in ("local", "checkpoint") and target.get("policy")
                label = target.get("policy") if own_policy else name
                table.add_row(label, "waiting", "", "", "", "", "", "", "", key=name)
        elif kind == "model_started":
            self._cell(model, status=Text("running", style="yellow"))
        elif kind == "progress" and event.get("stage"):  # the model being prepared: no groups yet
            self._cell(model, status=Text("preparing", style="yellow"))
            log.write(Text(str(event["stage"]), style="dim"))
        elif kind == "progress":
            self._cell(model, groups=f"{event.get('groups_done')}/{event.get('groups_total')}")
        elif kind == "model_result":
            errors = event.get("errors") or []
            ok = event.get("completions", 0) > 0
            self._cell(
                model,
                status=Text("done" if ok else "failed", style="green" if ok else "red"),
                groups=str(event.get("steps")),
                completions=str(event.get("completions")),
                correct=str(event.get("correct")),
                accuracy=f"{event['accuracy']:.1%}" if event.get("accuracy") is not None else "—",
                **{
                    "mean score": number(event.get("mean_score"), 3),
                    "time (s)": f"{event.get('duration_s', 0):.1f}",
                    "errors": str(len(errors)),
                },
            )
            for error in errors:
                log.write(Text(f"{model}: {error}", style="red"))
            scored = backend.scored_completions(event.get("rollouts_path") or "")
            for side, chosen in (("best", scored[:2]), ("worst", scored[-2:][::-1] if len(scored) > 2 else [])):
                for completion in chosen:
                    style = "green" if side == "best" else "red"
                    log.write(
                        Text(f"{side} · reward {completion['score']:.3f}: ", style=style)
                        + Text(completion["text"][:300])
                    )
        elif kind == "summary":
            log.write(Text(event.get("verdict", ""), style="bold"))

    def _cell(self, model: str | None, **cells) -> None:
        table = self.query_one(DataTable)
        if model is None:
            return
        if model not in self.models:
            self.models[model] = {}
            table.add_row(model, *[""] * 8, key=model)
        for column, value in cells.items():
            table.update_cell(model, column, value)
