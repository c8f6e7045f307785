"""The real dashboard, headless, over RUN_ID; every 0.2 s it writes what it shows (selected run, metric
rows, process rows) to STATUS_FILE so a test knows it is live before killing it. Run with the test's
HERMES_HOME."""

import sys
from pathlib import Path

from hermes_rl.tui.app import HermesDashboard
from hermes_rl.tui.panes.metrics import MetricsPane
from hermes_rl.tui.panes.processes import ProcessesPane

run_id, status_file = sys.argv[1], Path(sys.argv[2])


class Watched(HermesDashboard):
    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(0.2, self.report)

    def report(self) -> None:
        shown = (
            f"{self.selected_run} metrics={len(self.pane(MetricsPane).rows)} "
            f"processes={self.pane(ProcessesPane).table.row_count}\n"
        )
        status_file.write_text(shown)


Watched(run_id=run_id).run(headless=True, size=(160, 48))
