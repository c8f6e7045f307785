"""The trainer process: Atropos batches in, Tinker LoRA updates out, completions served in between.

One code path for both backends: the official `tinker` SDK talks either to Tinker cloud or,
through TINKER_BASE_URL, to this project's local Tinker-protocol server.

Exit codes: 0 = all steps done and results.json written, or stopped by SIGTERM/SIGINT (then
without results.json, so the run is not counted as completed); 1 = any error (logged);
2 = a config the trainer rejects; 3 = a missing or invalid Tinker key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
import traceback

from hermes_rl.core.base.fsutil import append_jsonl, atomic_write_json
from hermes_rl.core.base.plateau import plateau
from hermes_rl.core.base.secrets import ENDPOINT_KEY_ENV, LOCAL_TINKER_KEY_ENV
from hermes_rl.core.base.states import Metric
from hermes_rl.core.readers.metrics import JsonlTail

from .. import open_files_problem
from ..wandb_fallback import install_wandb_fallback
from . import grpo, tinker_link
from .accounting import Usage
from .digest_keeper import DigestKeeper
from .inference import Policy, start_server
from .rollouts import RolloutRecorder
from .run_api import RunApi
from .settings import ConfigError, TrainerSettings, load_settings
from .signals import SignalTracker
from .tokenizer import load_tokenizer

log = logging.getLogger("trainer")

TRAINER_STATE_FILE = "trainer_state.json"  # the newest save_state: path and step (read by `hermes-rl resume`)
CHECKPOINTS_FILE = "checkpoints.jsonl"  # every save_state, one line each (read by `hermes-rl sample`)
STOP_SAVE_TIMEOUT_S = 6.0  # each wait at a stop; both fit in the trainer's 15 s stop timeout


class KeyProblem(RuntimeError):
    pass


def _finite(value):
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


class WandbLogger:
    """W&B in a background thread: init can take seconds and must not delay readiness or steps."""

    def __init__(self, settings: TrainerSettings):
        self.settings = settings
        self.run = None
        self.failed = False
        self._pending: list[tuple[int, dict]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if settings.wandb_mode != "disabled":
            self._thread = threading.Thread(target=self._init, name="wandb-init", daemon=True)
            self._thread.start()

    def _init(self) -> None:
        try:
            import wandb  # noqa: PLC0415 - wandb (a second) loads on its own thread

            # The environments' mechanism: W&B unreachable (or a bad key) means offline, with a warning.
            install_wandb_fallback(warn=log.warning)
            wandb_dir = self.settings.run_dir
            self.run = wandb.init(
                project=self.settings.wandb_project,
                group=self.settings.wandb_group,
                name=self.settings.wandb_run_name,
                mode=self.settings.wandb_mode,
                dir=str(wandb_dir),
                config={
                    "backend": self.settings.backend,
                    "base_model": self.settings.base_model,
                    "batch_size": self.settings.batch_size,
                    "group_size": self.settings.group_size,
                    "total_steps": self.settings.total_steps,
                    "lora_rank": self.settings.lora_rank,
                    "learning_rate": self.settings.learning_rate,
                },
                settings=wandb.Settings(silent=True, console="off"),
            )
            offline = bool(getattr(self.run, "offline", False))
            url = None if offline else getattr(self.run, "url", None)
            mode = "offline" if offline else self.settings.wandb_mode
            log.info("W&B %s run %s%s", mode, self.run.name, f" at {url}" if url else f" in {wandb_dir}")
        except Exception as exc:  # even offline failed: training goes on, metrics.jsonl is the record
            self.failed = True
            log.warning("W&B disabled: init failed: %s", exc)

    def log(self, step: int, row: dict) -> None:
        if self.settings.wandb_mode == "disabled" or self.failed:
            return
        with self._lock:
            self._pending.append((step, {k: v for k, v in row.items() if k not in ("step", "time") and v is not None}))
            if self.run is None:
                return
            pending, self._pending = self._pending, []
        try:
            for s, data in pending:
                self.run.log(data, step=s)
        except Exception as exc:
            self.failed = True
            log.warning("W&B logging stopped: %s", exc)

    def finish(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.run is not None:
            with self._lock:
                pending, self._pending = self._pending, []
            try:
                for s, data in pending:
                    self.run.log(data, step=s)
                self.run.finish()
            except Exception as exc:
                log.warning("W&B finish failed: %s", exc)


class Trainer:
    def __init__(self, settings: TrainerSettings):
        self.settings = settings
        self.step = 0
        self.service_client = None
        self.training_client = None
        self.policy: Policy | None = None
        self.runner = None
        self.api: RunApi | None = None
        self.tinker_path: str | None = None
        self.wandb: WandbLogger | None = None
        self.rollouts = None  # RolloutRecorder when the run records rollouts
        self.signals: SignalTracker | None = None  # made once the policy exists
        self.digest = DigestKeeper(settings.run_dir)
        self.started_at = time.time()
        self.outcome = "errored"  # "success" | "errored" | "interrupted", for the Tinker session
        self.saved_step = 0  # the step of the newest save_state (what a resume continues from)
        self.step_task: asyncio.Future | None = None
        # Time spent between two rows that no row has counted yet (a checkpoint save, the previous row's write).
        self._carried = {"time/checkpoint_s": 0.0, "time/log_s": 0.0}
        # getattr: tests build a Trainer on a partial settings object
        run_dir = getattr(settings, "run_dir", None)
        self.usage = Usage(
            str(run_dir) if run_dir else None, getattr(settings, "budget_usd", None), getattr(settings, "price", None)
        )

    # ---- setup -------------------------------------------------------------------------
    def _prepare_backend_env(self) -> None:
        s = self.settings
        if s.backend == "local":
            os.environ["TINKER_BASE_URL"] = s.base_url or ""
            # The local server's own credential (its supervisor made it for this run); a Tinker cloud key
            # must not leak to it.
            key = os.environ.get(LOCAL_TINKER_KEY_ENV, "")
            if not key:
                raise KeyProblem(
                    f"{LOCAL_TINKER_KEY_ENV} is not set: the local backend's Tinker server requires the "
                    "credential it was started with (hermes-rl sets it for each run)"
                )
            os.environ["TINKER_API_KEY"] = key
        else:
            if s.base_url:
                os.environ["TINKER_BASE_URL"] = s.base_url
            key = os.environ.get("TINKER_API_KEY", "")
            if not key:
                raise KeyProblem(
                    "TINKER_API_KEY is not set: the tinker profile trains on Tinker cloud. "
                    "Set it in the environment or in $HERMES_HOME/.env (TINKER_API_KEY=tml-...), "
                    "or use the local profile."
                )
            if not key.startswith("tml-"):
                raise KeyProblem(
                    "TINKER_API_KEY is invalid: Tinker keys start with 'tml-'. Check the value in $HERMES_HOME/.env."
                )

    async def setup(self) -> None:
        s = self.settings
        self._prepare_backend_env()
        import tinker  # noqa: PLC0415 - tinker reads TINKER_BASE_URL/TINKER_API_KEY, set just above, and imports torch

        t0 = time.time()
        self.service_client = tinker.ServiceClient()
        try:
            if s.resume_state:
                # Weights and Adam moments as saved: the next step is the one the stopped run would have taken.
                self.training_client = await self.service_client.create_training_client_from_state_with_optimizer(
                    s.resume_state
                )
                self.step = self.saved_step = s.resume_step
                log.info("resuming from %s at step %d", s.resume_state, s.resume_step)
            else:
                self.training_client = await self.service_client.create_lora_training_client(
                    base_model=s.base_model, rank=s.lora_rank, seed=s.seed
                )
        except Exception as exc:
            text = str(exc)
            if s.backend == "tinker" and any(
                w in text.lower() for w in ("401", "403", "unauthor", "forbidden", "api key", "api_key")
            ):
                raise KeyProblem(
                    f"Tinker rejected TINKER_API_KEY ({type(exc).__name__}); check the key in $HERMES_HOME/.env"
                ) from None
            raise
        tinker_link.record_session(s, self.training_client)

        tokenizer = load_tokenizer(s.base_model, self.training_client)
        sampling_client = await self.training_client.save_weights_and_get_sampling_client()
        # The local server's sampled logprobs are untempered already (docs/tinker_local.md); the cloud's may not be.
        self.policy = Policy(tokenizer, s.base_model, rescore_tempered=s.backend != "local")
        self.policy.set_client(sampling_client, self.step)
        self.policy.step = self.step
        self.policy.tokens = self.usage.tokens
        self.signals = SignalTracker(s.batch_size, self.policy.sampled)
        if s.rollouts_path is not None:
            self.rollouts = RolloutRecorder(s.rollouts_path, tokenizer, finish_reason=self.policy.finish_reason)
        log.info(
            "training client ready (%s backend, model %s, LoRA rank %d, loss %s %s) in %.2fs",
            s.backend,
            s.base_model,
            s.lora_rank,
            s.loss_fn,
            s.loss_fn_config or "",
            time.time() - t0,
        )

        await self.register()
        key = os.environ.get(ENDPOINT_KEY_ENV) or None
        self.runner = await start_server(self.policy, s.inference_host, s.inference_port, key)
        log.info(
            "inference server on http://%s:%d (health: /health)%s",
            s.inference_host,
            s.inference_port,
            "" if key else f"; no {ENDPOINT_KEY_ENV}: it asks its clients for no key",
        )
        self.wandb = WandbLogger(s)

    async def register(self) -> None:
        s = self.settings
        self.api = RunApi(s.api_url, s.batch_poll_s, s.batch_poll_max_s)
        await self.api.register(
            {
                "wandb_group": s.wandb_group or "",
                "wandb_project": s.wandb_project,
                "batch_size": s.batch_size,
                "max_token_len": s.max_token_length,
                "checkpoint_dir": str(s.checkpoint_dir),
                "save_checkpoint_interval": s.save_checkpoint_interval,
                "starting_step": self.step,
                "num_steps": s.total_steps,
            }
        )
        log.info("registered with run-api at %s (batch_size %d, %d steps)", s.api_url, s.batch_size, s.total_steps)

    # ---- steps -------------------------------------------------------------------------
    async def train_step(self, batch: list[dict], waited_s: float) -> dict:
        """One GRPO update on `batch`; its row holds the step's phases as time/… seconds (PHASE_KEYS),
        which add up to the wall time since the previous row (time/step_s)."""
        from tinker import types  # noqa: PLC0415 - tinker imports torch: loaded in setup, named here

        s = self.settings
        t0 = time.perf_counter()
        sequences, stats = grpo.build_sequences(batch, s.max_token_trainer_length)
        if stats.groups_not_finite:
            log.warning(
                "step %d: %d group(s) dropped: an environment sent a score that is not a finite number "
                "(NaN or infinity)",
                self.step + 1,
                stats.groups_not_finite,
            )
        signal_row = self.signals.row(batch, self.step) if self.signals is not None else {}
        t_logged = time.perf_counter()
        if self.rollouts is not None:
            self.rollouts.record(self.step + 1, batch)
        logging_s = time.perf_counter() - t_logged
        row: dict = {}
        if sequences:
            datums = grpo.to_datums(sequences)
            self.usage.tokens.add("train", sum(len(seq.input_tokens) for seq in sequences))
            if not all(seq.has_sampling_logprobs for seq in sequences):
                datums = await self._fill_sampling_logprobs(sequences)
            # Submit the update and the snapshot back to back: the server runs them in order,
            # so one wait covers all three requests.
            fb_future = self.training_client.forward_backward(datums, s.loss_fn, s.loss_fn_config or None)
            optim_future = self.training_client.optim_step(
                types.AdamParams(
                    learning_rate=s.learning_rate,
                    beta1=s.beta1,
                    beta2=s.beta2,
                    weight_decay=s.weight_decay,
                    grad_clip_norm=s.grad_clip_norm,
                )
            )
            sampler_future = self.training_client.save_weights_and_get_sampling_client()
            t_sent = time.perf_counter()
            fb = await fb_future
            t_fb = time.perf_counter()
            optim = await optim_future
            t_optim = time.perf_counter()
            sampling_client = await sampler_future
            t_sampler = time.perf_counter()
            # The server runs the three requests in order: each wait is that request's share.
            row["time/forward_backward_s"] = t_fb - t_sent
            row["time/optim_step_s"] = t_optim - t_fb
            row["time/sampler_refresh_s"] = t_sampler - t_optim
            training_logprobs = [out["logprobs"].tolist() for out in fb.loss_fn_outputs]
            row.update(grpo.step_statistics(sequences, training_logprobs))
            for key, value in (fb.metrics or {}).items():
                row[f"tinker/{key}"] = value
            for key, value in (getattr(optim, "metrics", None) or {}).items():
                row[f"tinker/optim/{key}"] = value  # the local server reports Adam's step count as "step"
            self.policy.set_client(sampling_client, self.step + 1)
        else:
            row.update(
                {"train/loss": None, "logprobs/mean": None, "logprobs/mean_training": None, "logprobs/diff": None}
            )
        self.step += 1
        self.policy.step = self.step
        now = time.time()
        waits = {
            key: row.pop(key, 0.0) for key in ("time/forward_backward_s", "time/optim_step_s", "time/sampler_refresh_s")
        }
        phases = {
            "time/wait_batch_s": waited_s,
            # building sequences (and, for an environment without logprobs, the extra forward pass), statistics
            "time/prepare_s": max(0.0, time.perf_counter() - t0 - logging_s - sum(waits.values())),
            **waits,
            "time/checkpoint_s": self._carried["time/checkpoint_s"],
            # this step's rollout recording, and the previous step's metrics row and W&B log
            "time/log_s": logging_s + self._carried["time/log_s"],
        }
        self._carried = {"time/checkpoint_s": 0.0, "time/log_s": 0.0}
        row = {
            "step": self.step,
            "time": now,
            "train/loss": row.pop("train/loss"),
            "train/learning_rate": s.learning_rate,
            "reward/mean": grpo.mean(stats.rewards) if stats.rewards else None,
            "logprobs/mean": row.pop("logprobs/mean"),
            "logprobs/mean_training": row.pop("logprobs/mean_training"),
            "logprobs/diff": row.pop("logprobs/diff"),
            "advantages/mean": grpo.mean(stats.advantages) if stats.advantages else None,
            "advantages/std": grpo.std(stats.advantages) if stats.advantages else None,
            "time/step_s": sum(phases.values()),
            **phases,
            "batch/sequences": len(sequences),
            "batch/groups": stats.groups,
            "batch/groups_dropped": stats.groups_dropped,
            **self.usage.row(),
            **row,
            **signal_row,  # whether the batch could teach anything (signals.py, docs/audit.md)
        }
        row = {k: _finite(v) for k, v in row.items()}
        t_write = time.perf_counter()
        append_jsonl(s.metrics_path, row)
        self.wandb.log(self.step, row)
        self._carried["time/log_s"] += time.perf_counter() - t_write
        return row

    async def _fill_sampling_logprobs(self, sequences: list[grpo.Sequence]):
        """An environment that sent no inference_logprobs: take the current policy's logprobs
        as the sampler's (ratio 1, plain policy gradient) with one extra forward pass."""
        from tinker import types  # noqa: PLC0415 - tinker imports torch: loaded in setup, named here

        probe = [
            types.Datum(
                model_input=types.ModelInput.from_ints(seq.input_tokens),
                loss_fn_inputs={"target_tokens": seq.target_tokens, "weights": seq.completion_mask},
            )
            for seq in sequences
        ]
        out = await self.training_client.forward(probe, "cross_entropy")
        self.usage.tokens.add("train", sum(len(seq.input_tokens) for seq in sequences))
        for seq, result in zip(sequences, out.loss_fn_outputs):
            lps = result["logprobs"].tolist()
            seq.sampling_logprobs = [lp if c else 0.0 for lp, c in zip(lps, seq.completion_mask)]
            seq.has_sampling_logprobs = True
        return grpo.to_datums(sequences)

    async def save_checkpoint(self, name: str) -> str:
        """save_state (weights + Adam moments), recorded in trainer_state.json: what a resume continues from."""
        result = await self.training_client.save_state(name)
        self.tinker_path = result.path
        self.saved_step = self.step
        state = {
            "state_path": result.path,
            "step": self.step,
            "local_path": tinker_link.local_checkpoint_path(self.settings, result.path),
            "backend": self.settings.backend,
            "saved_at": time.time(),
        }
        atomic_write_json(self.settings.run_dir / TRAINER_STATE_FILE, state)
        append_jsonl(self.settings.run_dir / CHECKPOINTS_FILE, {"name": name, **state})
        log.info("checkpoint %s saved at step %d: %s", name, self.step, result.path)
        return result.path

    async def save_at_stop(self) -> None:
        """On a stop: let a step in progress finish (its update is on the server already), then
        save the state unless the newest save has it. With the Tinker server gone (the run is failing
        because it died) there is nothing to save to: the SDK would only retry until the timeout."""
        if not await tinker_link.reachable(self.settings.base_url):
            log.warning("Tinker server at %s does not answer: no state saved at stop", self.settings.base_url)
            return
        if self.step_task is not None and not self.step_task.done():
            await asyncio.wait_for(asyncio.shield(self.step_task), STOP_SAVE_TIMEOUT_S)
        if self.training_client is not None and self.step > self.saved_step:
            await asyncio.wait_for(self.save_checkpoint(f"stop-{self.step:06d}"), STOP_SAVE_TIMEOUT_S)

    async def run(self) -> int:
        s = self.settings
        s.run_dir.mkdir(parents=True, exist_ok=True)
        s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        await self.setup()
        api = self.api
        assert api is not None  # setup registered
        log.info("training %d steps", s.total_steps)
        self._pending = pending = asyncio.ensure_future(api.next_batch())
        while self.step < s.total_steps:
            wait_start = time.perf_counter()
            if self.policy is not None and not pending.done():
                self.policy.waiting_since = time.monotonic()
            try:
                batch = await pending
            finally:
                if self.policy is not None:
                    self.policy.waiting_since = None
            waited = time.perf_counter() - wait_start
            # Fetch the next batch while this one trains.
            if self.step + 1 < s.total_steps:
                self._pending = pending = asyncio.ensure_future(api.next_batch())
            # Shielded: a stop lets the step finish, so the saved state and the step count agree.
            self.step_task = asyncio.ensure_future(self.train_step(batch, waited))
            row = await asyncio.shield(self.step_task)
            t_logged = time.perf_counter()
            log.info(
                "step %d/%d reward %.3f loss %s step %.2fs",
                self.step,
                s.total_steps,
                row.get("reward/mean") or 0.0,
                f"{row['train/loss']:.4f}" if row.get("train/loss") is not None else "n/a",
                row["time/step_s"],
            )
            self.digest.tick()
            t_saved = time.perf_counter()
            self._carried["time/log_s"] += t_saved - t_logged
            if s.save_checkpoint_interval and self.step % s.save_checkpoint_interval == 0 and self.step < s.total_steps:
                await self.save_checkpoint(f"step-{self.step:06d}")
                self._carried["time/checkpoint_s"] += time.perf_counter() - t_saved
            self.budget_reached = self.usage.budget.reached(row)
            if self.budget_reached:
                log.info("stopping at step %d: %s", self.step, self.budget_reached)
                if not pending.done():
                    pending.cancel()
                break
            flat = self.eval_plateau()
            if flat is not None:
                log.info(
                    "stopping early at step %d: %s (stop_on_plateau %d)", self.step, flat["text"], s.stop_on_plateau
                )
                self.stopped_on_plateau = {**flat, "step": self.step}
                if not pending.done():
                    pending.cancel()
                break
        self.digest.update()
        tinker_path = await self.save_checkpoint("final")
        local = tinker_link.local_checkpoint_path(s, tinker_path)
        results = {
            "final_checkpoint": local or tinker_path,
            "tinker_path": tinker_path,
            "steps": self.step,
            "backend": s.backend,
            "base_model": s.base_model,
            "finished_at": time.time(),
            "stopped_on_plateau": self.stopped_on_plateau,
            # The run's reason in status and the runs listing (the supervisor reads it from this file).
            "finish_reason": self.finish_reason(),
        }
        atomic_write_json(s.results_path, results)
        log.info("done: %d steps, final checkpoint %s", self.step, results["final_checkpoint"])
        self.outcome = "success"
        return 0

    _pending: asyncio.Future | None = None
    stopped_on_plateau: dict | None = None  # the plateau that ended the run early (stop_on_plateau)
    budget_reached: str | None = None  # "budget reached: $X of $Y" when the budget ended the run
    _evals = None  # (reader of env_metrics.jsonl, the eval series so far), made on the first look

    def finish_reason(self) -> str | None:
        """How the run ended when that was not its last step; None when it ran to total_steps."""
        if self.budget_reached:
            return f"{self.budget_reached} (stopped at step {self.step})"
        flat = self.stopped_on_plateau
        return f"stopped early at step {flat['step']}: {flat['text']} (stop_on_plateau)" if flat else None

    def eval_plateau(self) -> dict | None:
        """The eval plateau (core.base.plateau) of stop_on_plateau evals, read from what the environments
        appended to env_metrics.jsonl since the last step; None when it is off or the curve still moves."""
        if not self.settings.stop_on_plateau:
            return None

        if self._evals is None:
            self._evals = (JsonlTail(self.settings.env_metrics_path), [])
        reader, series = self._evals
        key = str(Metric.EVAL_PERCENT_CORRECT)
        for row in reader.poll():
            value, step = row.get(key), row.get("step")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(step, int):
                series.append((step, float(value)))
        return plateau(series, self.settings.stop_on_plateau)

    async def close(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        if self.runner is not None:
            await self.runner.cleanup()
        if self.api is not None:
            await self.api.close()
        if self.wandb is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.wandb.finish)
        if self.rollouts is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.rollouts.close)
            if self.rollouts.skipped_batches:
                log.info("rollouts: %d batches skipped while the writer was busy", self.rollouts.skipped_batches)
        if self.service_client is not None and not await tinker_link.reachable(self.settings.base_url):
            # The server is gone (its process died, the run is failing): the SDK would retry the
            # close until our timeout, holding up the stop of the whole run for nothing.
            log.warning("Tinker server at %s does not answer: session not closed", self.settings.base_url)
        elif self.service_client is not None:
            # After the inference server stopped: nothing samples any more.
            await tinker_link.read_local_usage(self.settings)
            # Ends the Tinker session (and its heartbeats) with how the run went.
            try:
                await asyncio.wait_for(asyncio.ensure_future(self.service_client.close(self.outcome)), 5)
            except BaseException as exc:
                log.warning("closing the Tinker session failed: %s", exc)


async def amain(settings: TrainerSettings) -> int:
    trainer = Trainer(settings)
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    stopped = {"signal": None}

    def on_signal(signum: int) -> None:
        stopped["signal"] = signum
        main_task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await trainer.run()
    except asyncio.CancelledError:
        if stopped["signal"] is None:
            raise
        trainer.outcome = "interrupted"
        try:
            await trainer.save_at_stop()
        except BaseException as exc:
            log.warning("could not save the state at stop: %s: %s", type(exc).__name__, exc)
        log.info(
            "stopped by %s at step %d (no results.json: not completed; resumable from step %d)",
            signal.Signals(stopped["signal"]).name,
            trainer.step,
            trainer.saved_step,
        )
        return 0
    except KeyProblem as exc:
        log.error("%s", exc)
        return 3
    except Exception as exc:
        log.error(
            "training failed at step %d: %s: %s\n%s", trainer.step + 1, type(exc).__name__, exc, traceback.format_exc()
        )
        return 1
    finally:
        try:
            await asyncio.shield(trainer.close())
        except BaseException:
            pass


def main(config_path: str) -> int:
    # The trainer only sends tokens and numbers; the tinker SDK imports torch when it can (~5 s of
    # CPU here) just for optional tensor conversions. Without it the SDK uses numpy.
    if "torch" not in sys.modules and os.environ.get("HERMES_TRAINER_ALLOW_TORCH") != "1":
        sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` raise ImportError
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    for noisy in ("httpx", "httpcore", "tinker", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    problem = open_files_problem()
    if problem:
        log.error("%s", problem)
        return 2
    try:
        settings = load_settings(config_path)
    except ConfigError as exc:
        log.error("config rejected: %s", exc)
        return 2
    return asyncio.run(amain(settings))
