"""The records that cross module boundaries, as TypedDicts: what the run library returns (run summaries,
run views, process records, results, status reports) and what the environment library returns
(environment entries, config field rows, a field change). Plain dicts at run time (JSON in, JSON out);
these types name their keys once, for readers and type checkers.

Status strings are `hermes_rl.core.base.states.RunStatus` / `ProcState` values.
"""

from typing import Any, NotRequired, TypedDict

# -- runs ----------------------------------------------------------------------------------------


class StallFields(TypedDict):
    """The stall rule's verdict on a run (one rule for every client; see runs.stall_threshold)."""

    last_activity_at: float | None  # newest metric row, trainer log line or start (active runs only)
    stalled: bool  # a running run with no metric row and no trainer log line for HERMES_RL_STALL_S
    stalled_for_s: float | None  # seconds without progress when stalled


class HealthVerdict(TypedDict):
    """Whether work flows through a running run (core.runs.flow; one rule for every client)."""

    state: str | None  # "ok" | "no_progress" | "failing"; None when the run is not running
    reason: str | None  # which process, how many times, the message
    tip: str | None  # what to do about it
    process: str | None  # the process the reason names
    no_step_for_s: float | None  # since the run became ready or its last trained step
    threshold_s: float | None  # the no-step threshold this run gets (its own start-up and step times)
    groups_delivered: int | None  # scored groups run-api received (its access log)
    api: dict[str, Any] | None  # run-api's last /status answer (queue_size, current_step, time)
    problems: dict[str, Any]  # per process: error and warning line counts, its most frequent problems


class _SummaryFields(TypedDict):
    run_id: str
    environment: str | None
    profile: str | None
    status: str
    created_at: float | None
    started_at: float | None
    ended_at: float | None
    step: int | None
    total_steps: int | None
    reward_mean: float | None  # the newest step's reward/mean (one batch)
    reward: float | None  # the headline reward: reward/mean averaged over the last reward_window steps
    reward_window: int  # steps the headline reward averages
    eval_first: float | None  # the first greedy eval accuracy an environment logged (eval/percent_correct)
    eval_last: float | None  # the latest one
    reason: str | None
    parent_run_id: str | None  # a resumed run: the run it continues
    sweep_id: str | None  # the sweep the run belongs to (core.runs.sweeps)
    sweep_index: int | None  # its member's place in that sweep (how a sweep queue adopts the run)
    profile_changes: dict[str, Any]  # profile values changed for this run only (a sweep's configuration)
    tokens: dict[str, int] | None  # the trainer's token totals {prefill, sample, train}; None: not counted
    cost_usd: float | None  # those tokens at the model's price (core.runs.cost); None: price unknown


class RunSummary(_SummaryFields, StallFields):
    """One row of runs.list_runs()."""

    health: HealthVerdict
    audit: dict[str, Any]  # {verdict, reason}: the audit's verdict and first reason (core.base.audit_rule)


class ProcessRecord(TypedDict):
    """A process as run.json records it (daemons.pipeline.process_record)."""

    name: str
    pid: int | None
    create_time: float | None
    start_ticks: int | None
    pgid: int | None
    argv_redacted: list[str]
    state: str  # ProcState
    started_at: float | None
    ready_at: float | None
    ended_at: float | None
    exit_code: int | None
    restarts: int
    log: str
    port: int | None
    required: bool
    completes_run: bool
    depends_on: list[list[str]]
    readiness: str
    cwd: NotRequired[str | None]  # where it runs (None: the run folder)
    import_path: NotRequired[list[str] | None]  # PYTHONPATH it was given
    launcher: NotRequired[str]  # a launcher's name: "local", "slurm", a plug-in's
    job: NotRequired[dict[str, Any] | None]  # a job elsewhere: {launcher, id, node, state}
    job_id: NotRequired[str | None]  # run.json before `job`: a Slurm job's id, node and squeue state
    node: NotRequired[str | None]
    slurm_state: NotRequired[str | None]
    where: NotRequired[str]  # where it runs in one line (a reader's, from its launcher)


class ProcessView(ProcessRecord):
    """A process in runs.get_run(): its record plus what a reader observes now."""

    alive: bool
    health: str  # its state, or "gone" when recorded alive but no longer running
    cpu_percent: float | None
    rss: int | None
    threads: int | None
    uptime_s: float | None


class _RunFields(TypedDict):
    run_id: str
    environment: str
    profile: str
    status: str  # RunStatus, never "lost"
    created_at: float
    started_at: float | None
    ended_at: float | None
    reason: str | None
    supervisor: dict[str, Any] | None
    ports: dict[str, int]
    total_steps: int | None
    wandb: dict[str, Any] | None
    watchdog: NotRequired[dict[str, Any]]
    backend: NotRequired[str]
    config_path: NotRequired[str]
    parent_run_id: NotRequired[str]  # a resumed run: the run it continues
    resumed_from: NotRequired[dict[str, Any]]  # {"step", "state_path"} it continued from
    profile_values: NotRequired[dict[str, Any]]  # the profile's values the run trained with
    profile_changes: NotRequired[dict[str, Any]]  # values changed for this run only (a sweep's configuration)
    seed: NotRequired[int | None]
    sweep: NotRequired[dict[str, Any]]  # {"id", "index", "config", "seed"} of the sweep it belongs to
    workers: NotRequired[dict[str, Any]]  # its environment workers: replicas, launcher, address


class RunRecord(_RunFields):
    """run.json as the launcher and the supervisor write it."""

    processes: list[ProcessRecord]


class RunView(_RunFields, StallFields):
    """runs.get_run(): run.json plus what readers derive (lost status, liveness, last metric row)."""

    processes: list[ProcessView]
    supervisor_alive: bool
    last_metric: dict[str, Any]
    logs: dict[str, str | None]  # process name -> log path
    supervisor_log: str
    run_dir: str
    health: HealthVerdict
    audit: dict[str, Any]  # {verdict, reasons, signals} (core.base.audit_rule)
    recorded_status: NotRequired[str]  # a lost run: the status run.json still holds
    survivors: NotRequired[list[dict[str, Any]]]  # a lost run: its processes still running


class StartedRun(RunRecord):
    """runs.start_run(): run.json plus the notices about the choices made (e.g. no key: local backend)."""

    notices: list[str]


class MetricSummary(TypedDict):
    """readers.metrics.metric_summary(): one metric over a run."""

    first: float
    best: float | None  # null for a metric without a direction
    best_step: int | None
    last: float
    last_step: int


class Results(TypedDict):
    """runs.get_results()."""

    run_id: str
    status: str
    reason: str | None
    environment: str | None
    profile: str | None
    total_steps: int | None
    steps_done: int
    final_metrics: dict[str, Any]
    history: list[dict[str, Any]]  # <= 50 evenly spaced metric rows, first and last included
    eval_accuracy: MetricSummary | None  # greedy eval accuracy (eval/percent_correct); None: never evaluated
    checkpoint: str | None
    tinker_path: str | None
    results: dict[str, Any]  # results.json as the trainer wrote it
    wandb: dict[str, Any] | None


# -- reports (runs.report): what the agent tools and the CLI both answer ---------------------------


class ProcessSummary(TypedDict):
    name: str
    state: str  # ProcState
    health: str
    pid: int | None
    exit_code: int | None
    uptime_s: float | None
    restarts: int
    cpu_percent: float | None
    rss: int | None
    cwd: str | None  # where it runs (None: the run folder)
    import_path: list[str] | None  # PYTHONPATH it was given: an environment's import root first
    launcher: str  # a launcher's name: "local", "slurm", a plug-in's
    job_id: str | None  # its job, on a launcher that runs it elsewhere
    node: str | None  # the node that job runs on
    where: str | None  # where it runs, in one line, the same words for every launcher ("local", "vm RUNNING")
    slurm_state: str | None  # a Slurm job's state, as earlier versions named it (PENDING, RUNNING, CANCELLED, ...)


class MetricsSummary(TypedDict):
    step: int | None
    total_steps: int | None
    reward_mean: float | None
    percent_correct: float | None
    eval_percent_correct: float | None
    loss: float | None


class SampleCompletion(TypedDict):
    group: int | None
    prompt: str
    text: str
    reward: float | None
    advantage: float | None
    finish: str | None


class SampleCompletions(TypedDict):
    """readers.rollouts.sample_completions(): the latest recorded step's best and worst completions."""

    step: int
    completions: int
    zero_reward: int
    best: list[SampleCompletion]
    worst: list[SampleCompletion]


class EnvironmentSummary(TypedDict):
    """One environment of a run: its share of the batches, its workers and its own latest metrics."""

    environment: str
    weight: float
    min_batch_allocation: float | None
    processes: list[str]  # its worker processes (env, env-1 … env-gsm8k …)
    ready: int  # how many of them are ready
    metrics: dict[str, Any]  # its latest values (eval/percent_correct, train/...), on a run of several


class StatusReport(TypedDict):
    run_id: str
    status: str
    reason: str | None
    environment: str | None
    profile: str | None
    processes: list[ProcessSummary]
    environments: list[EnvironmentSummary]
    running_time_s: float | None
    metrics: MetricsSummary
    reward: dict[str, Any] | None  # {value, window, steps}: reward/mean averaged over the last `window` steps
    step_time: dict[str, Any] | None  # {step_s, phases, dominant: {key, label, share}, steps, text}
    plateau: dict[str, Any] | None  # {flat_evals, since_step, best, text} once the eval curve is flat
    cost: dict[str, Any] | None  # {usd, text, tokens: {prefill, sample, train}, prices_as_of, projected, ...}
    stalled: bool
    stalled_for_s: float | None
    health: HealthVerdict
    endpoint: str | None  # the run's OpenAI-compatible endpoint over its live policy (docs/verifiers.md)
    endpoint_key_file: str | None  # the file holding the key that endpoint requires (a path, never the key)
    wandb_url: str | None
    log_paths: dict[str, str]
    sample_completions: SampleCompletions | None
    tips: list[str]
    audit: dict[str, Any]  # {verdict, reasons, signals}: is it learning, and if not why (core.base.audit_rule)


class ResultsSummary(TypedDict):
    run_id: str
    status: str
    environment: str | None
    profile: str | None
    reason: str | None
    total_steps: int | None
    final_metrics: dict[str, Any]
    history: list[dict[str, Any]]  # the sample's rows, step and headline metrics only
    eval_accuracy: MetricSummary | None
    checkpoint: str | None
    tinker_path: str | None
    cost: dict[str, Any] | None  # as StatusReport's
    wandb_url: str | None
    log_paths: dict[str, str]
    sample_completions: SampleCompletions | None
    audit: dict[str, Any]  # {verdict, reasons, signals} (core.base.audit_rule)


# -- environments and their config ---------------------------------------------------------------


class EnvironmentEntry(TypedDict):
    """envs.discovery.EnvInfo.to_dict()."""

    id: str  # unique across every scanned folder; what `select` and `start` take
    name: str
    class_name: str
    file: str
    description: str
    config_class: str | None
    source: str  # "project" | "user" | "tinker-atropos" | "extra"
    error: str | None
    duplicate_of: str | None  # file of the environment the bare name resolves to, when that is another one
    abstract: str | None  # why it is a base class, not an environment to run
    kind: str  # "atropos" (a BaseEnv file) | "verifiers" (a v1 taskset)
    python: str | None  # a verifiers taskset's interpreter (its own venv); None for Atropos environments
    refused: str | None  # why a listed taskset cannot train here (it needs a sandbox...)


class FieldRow(TypedDict):
    """An editable field of a config view: its FieldInfo plus the value in effect."""

    name: str
    type: str  # "int" | "float" | "bool" | "str" | "list" | "dict" | "enum"
    default: Any
    description: str
    choices: list | None
    nullable: bool
    minimum: float | None
    maximum: float | None
    exclusive_minimum: bool
    exclusive_maximum: bool
    section: str  # "env" or "tinker"
    value: Any
    modified: bool


class LockedField(TypedDict):
    name: str
    value: Any
    reason: str


class Selection(TypedDict):
    """What select_environment() saved: the environment (and profile) every client works on."""

    environment: str
    profile: str | None
    file: str
    description: str
    notice: NotRequired[str]  # where it was found, saved so that every client finds it (core.envs.envsettings)


class FieldChange(TypedDict):
    """set_field(): one field's change, as stored."""

    environment: str
    profile: str
    field: str
    value: Any
    previous: Any
    default: Any
    modified: bool
    notices: NotRequired[list[str]]
