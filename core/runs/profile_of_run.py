"""The profile values a run trained with, and a new profile derived from them (the dashboard's
"Derive a profile from this run's values", `hermes-rl profile new NAME --from-run RUN`)."""

from __future__ import annotations

from ..base.errors import BadInput
from ..envs.profile_derive import DERIVABLE_FIELDS, create_profile, source_values
from ..envs.profiles import TRAINING_FIELDS, Profile, get_profile
from .runconfig import read_run_config
from .store import read_run

# Where each profile value lands in config.yaml: runs recorded before run.json held `profile_values`
# are read from there.
CONFIG_PLACES = {
    "tokenizer_name": ("env", "tokenizer_name"),
    "base_model": ("tinker", "base_model"),
    "max_token_length": ("env", "max_token_length"),
    "max_num_workers": ("env", "max_num_workers"),
    "total_steps": ("env", "total_steps"),
    "lora_rank": ("tinker", "lora_rank"),
    "learning_rate": ("tinker", "learning_rate"),
    "max_token_trainer_length": ("tinker", "max_token_trainer_length"),
    "group_size": ("env", "group_size"),
    "batch_size": ("env", "batch_size"),
}


def run_profile_values(run_id: str) -> dict:
    """The profile values of a run: those run.json recorded at its start, else read from its config.yaml."""
    run = read_run(run_id)
    recorded = run.get("profile_values")
    if isinstance(recorded, dict) and recorded:
        values = dict(recorded)
    else:
        config = read_run_config(run_id)
        values = {}
        for key, (section, name) in CONFIG_PLACES.items():
            value = (config.get(section) or {}).get(name)
            if value is not None:
                values[key] = value
    # the training values are the run's own (editable), which a derived profile takes as defaults; its
    # budget is not carried over (a sweep member's is a share of its sweep's)
    config = read_run_config(run_id)
    for key in TRAINING_FIELDS:
        section, name = CONFIG_PLACES[key]
        value = (config.get(section) or {}).get(name)
        if value is not None:
            values[key] = value
    return {k: v for k, v in values.items() if k in DERIVABLE_FIELDS}


def profile_from_run(run_id: str, name: str, *, description: str | None = None) -> Profile:
    """A new profile NAME holding the values run RUN trained with, extending the built-in its profile
    rests on (only the values that differ from that profile are written)."""
    run = read_run(run_id)
    source = run.get("profile") or "local"
    try:
        current = get_profile(source).values()
        source_values(source)
    except BadInput as exc:
        raise BadInput(f"run {run_id}'s profile {source} cannot be read: {exc.message}", hint=exc.hint) from None
    changes = {k: v for k, v in run_profile_values(run_id).items() if current.get(k) != v}
    return create_profile(
        name, source, changes, description=description or f"the values of run {run_id} ({source} profile)"
    )
