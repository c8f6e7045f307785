"""How a run's environment workers are launched: how many replicas, where (this machine or Slurm), and
the address its servers bind so that the workers reach them.

config.yaml's `workers:` section, checked here once:

    workers:
      launcher: local | slurm    # local: process groups on this machine (the default)
      replicas: 1                # environment processes, each registering with run-api on its own
      address: 127.0.0.1         # what run-api and the trainer's inference server bind, and the
                                 # workers' URLs name; a Slurm run defaults to this host's address
      slurm: {partition, time, cpus_per_worker, mem_per_worker, sbatch_args}

Atropos' run-api has no authentication: whoever reaches its address can register an environment or
read batches. Binding beyond loopback is therefore only done when asked for, with a warning.
"""

from __future__ import annotations

import ipaddress
import socket

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.daemons.launchers import LAUNCHERS, slurm_settings

LOOPBACK = "127.0.0.1"
MAX_REPLICAS = 64
WORKER_KEYS = ("launcher", "replicas", "address", "slurm")


def this_host_address() -> str:
    """The address other nodes reach this one by: its hostname's, as the cluster's resolver gives it."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return LOOPBACK


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def resolve_workers(data: dict | None, values: dict | None = None) -> dict:
    """A complete `workers:` section from what the user chose for this start (`data`), over the
    draft's editable `replicas` / `env_launcher` (`values`), over the local defaults; BadInput
    naming the field when a value cannot be used."""
    drafted = {"replicas": (values or {}).get("replicas"), "launcher": (values or {}).get("env_launcher")}
    data = {**{k: v for k, v in drafted.items() if v is not None}, **(data or {})}
    unknown = sorted(set(data) - set(WORKER_KEYS))
    if unknown:
        raise BadInput(f"unknown workers setting(s): {', '.join(unknown)}", hint=f"known: {', '.join(WORKER_KEYS)}")
    launcher = data.get("launcher") or "local"
    if launcher not in LAUNCHERS:
        raise BadInput(f"env_launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    replicas = data.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"replicas must be an integer from 1 to {MAX_REPLICAS}, got {replicas!r}")
    address = data.get("address") or (this_host_address() if launcher == "slurm" else LOOPBACK)
    if not isinstance(address, str):
        raise BadInput(f"address must be an IP address or host name, got {address!r}")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        try:
            socket.gethostbyname(address)
        except OSError:
            raise BadInput(f"address {address!r} does not resolve on this machine") from None
    if address in ("0.0.0.0", "::"):
        raise BadInput(
            f"address {address} cannot be reached by workers",
            hint="give the address of this machine the workers' nodes reach (its interface on the cluster network)",
        )
    slurm = slurm_settings(data.get("slurm")).to_json() if launcher == "slurm" else {}
    return {"launcher": launcher, "replicas": replicas, "address": address, "slurm": slurm}


def exposure_warning(workers: dict) -> str | None:
    """A notice for a run whose servers bind beyond loopback: run-api has no authentication."""
    address = workers.get("address") or LOOPBACK
    if is_loopback(address):
        return None
    return (
        f"run-api and the trainer's inference server listen on {address}: run-api has no authentication, "
        "so anyone who reaches that address can register environments and read batches; "
        "use an address only the cluster reaches"
    )


def replica_names(replicas: int) -> list[str]:
    """Process names of a run's environment workers: `env` alone, else env-1 … env-N."""
    return ["env"] if replicas == 1 else [f"env-{i}" for i in range(1, replicas + 1)]
