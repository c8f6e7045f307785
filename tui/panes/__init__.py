"""The dashboard's panes, one module each: [1] environments, [2] config, [3] runs, [4] processes,
[5] logs, [6] metrics (with its chart screen), and the test-inference screen."""
