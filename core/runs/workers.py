"""How a run's environment workers are launched: how many replicas, where (a launcher: this machine,
Slurm, one a package publishes), and the address its servers bind so that the workers reach them.

config.yaml's `workers:` section, checked here once:

    workers:
      launcher: local | slurm | … # local: process groups on this machine (the default); any launcher
                                 # the registry knows (daemons.launchers), a plug-in's included
      replicas: 1                # environment processes, each registering with run-api on its own
      address: 127.0.0.1         # what run-api and the trainer's inference server bind, and the
                                 # workers' URLs name; a Slurm run defaults to this host's address
      slurm: {partition, time, cpus_per_worker, mem_per_worker, account, qos, gres, constraint, signal,
              setup, wrapper, python, sbatch_args}   # over $HERMES_HOME/rl/slurm.yaml (launchers.slurm)
      <launcher>: {...}          # any launcher's settings under its name, over its site file
      weight: 1.0                # the run's own environment in the batch mix (Atropos inference_weight)
      min_batch_allocation: null # its least share of every batch (0-1), Atropos' min_batch_allocation
      environments:              # more environments beside it, each with its own config file
        - {environment: gsm8k, weight: 0.5, min_batch_allocation: 0.2, replicas: 1}

Atropos' run-api has no authentication: whoever reaches its address can register an environment or
read batches. Binding beyond loopback is therefore only done when asked for, with a warning.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import asdict, is_dataclass

from ..base.errors import BadInput
from ..base.paths import rl_dir
from ..daemons import launchers

LOOPBACK = "127.0.0.1"
MAX_REPLICAS = 64
WORKER_KEYS = ("launcher", "replicas", "address", "slurm", "weight", "min_batch_allocation", "environments")
MIX_KEYS = ("environment", "weight", "min_batch_allocation", "replicas")


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
    known = [*WORKER_KEYS, *(n for n in launchers.names() if n not in WORKER_KEYS)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise BadInput(f"unknown workers setting(s): {', '.join(unknown)}", hint=f"known: {', '.join(known)}")
    launcher = data.get("launcher") or "local"
    chosen = launchers.find(launcher) if isinstance(launcher, str) else None
    if chosen is None:
        raise BadInput(f"env_launcher must be one of {', '.join(launchers.names())}, got {launcher!r}")
    replicas = data.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"replicas must be an integer from 1 to {MAX_REPLICAS}, got {replicas!r}")
    address = data.get("address") or (this_host_address() if chosen.remote else LOOPBACK)
    if not isinstance(address, str):
        raise BadInput(f"address must be an IP address or host name, got {address!r}")
    address = bound_address(address)
    # the launcher's settings: its site's ($HERMES_HOME/rl/slurm.yaml …) under this start's
    settings = launcher_settings(launcher, data.get(launcher)) if chosen.settings_class is not None else {}
    weight = _weight(data.get("weight", 1.0), "weight")
    share = _share(data.get("min_batch_allocation"), "min_batch_allocation")
    environments = [_mixed(item, i) for i, item in enumerate(_list(data.get("environments")))]
    shares = [share or 0.0] + [e["min_batch_allocation"] or 0.0 for e in environments]
    if sum(shares) > 1.0:
        raise BadInput(f"the environments' min_batch_allocation add up to {sum(shares):g}: at most 1 in all")
    return {
        "launcher": launcher,
        "replicas": replicas,
        "address": address,
        "slurm": {},  # config.yaml has always had it; the launcher's own settings below replace it
        **({launcher: settings} if chosen.settings_class is not None else {}),
        "weight": weight,
        "min_batch_allocation": share,
        "environments": environments,
    }


def site_and_given(launcher: str, given) -> dict:
    """A start's settings for `launcher` over its site file's; BadInput for a command key a start gives
    (daemons.launchers.base.settings_over_site: the one rule for commands)."""
    chosen = launchers.get(launcher)
    site_file = str(rl_dir() / chosen.site_file) if chosen.site_file else f"{launcher} site settings"
    return launchers.settings_over_site(
        launcher, chosen.site_settings(), given, site_file=site_file, settings_class=chosen.settings_class
    )


def launcher_settings(launcher: str, given) -> dict:
    """`launcher`'s settings for a run, checked, as config.yaml records them."""
    settings = launchers.get(launcher).settings(site_and_given(launcher, given))
    if settings is None:
        return {}
    to_json = getattr(settings, "to_json", None)
    if callable(to_json):
        return to_json()
    if is_dataclass(settings) and not isinstance(settings, type):
        return asdict(settings)
    return dict(settings)


def _list(value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadInput(f"environments must be a list of {{{', '.join(MIX_KEYS)}}}, got {value!r}")
    return value


def _weight(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e6:
        raise BadInput(f"{what} must be a number above 0, got {value!r}")
    return float(value)


def _share(value, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise BadInput(f"{what} must be a fraction from 0 to 1 (or none), got {value!r}")
    return float(value)


def _mixed(item, index: int) -> dict:
    """One more environment of the run: {environment, weight, min_batch_allocation, replicas}."""
    if isinstance(item, str):
        item = {"environment": item}
    if not isinstance(item, dict) or not isinstance(item.get("environment"), str) or not item["environment"]:
        raise BadInput(f"environments[{index}] must name an environment, got {item!r}")
    unknown = sorted(set(item) - set(MIX_KEYS))
    if unknown:
        raise BadInput(f"environments[{index}]: unknown setting(s) {', '.join(unknown)}", hint=f"known: {MIX_KEYS}")
    replicas = item.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"environments[{index}].replicas must be an integer from 1 to {MAX_REPLICAS}, got {replicas!r}")
    return {
        "environment": item["environment"],
        "weight": _weight(item.get("weight", 1.0), f"environments[{index}].weight"),
        "min_batch_allocation": _share(item.get("min_batch_allocation"), f"environments[{index}].min_batch_allocation"),
        "replicas": replicas,
    }


def parse_mix(text: str) -> dict:
    """The CLI's `--mix ENV[:WEIGHT[:MIN_SHARE[:REPLICAS]]]` as an environments entry."""
    parts = text.split(":")
    if not parts[0] or len(parts) > 4:
        raise BadInput(f"--mix {text!r}: use ENV[:WEIGHT[:MIN_BATCH_ALLOCATION[:REPLICAS]]]")
    item: dict = {"environment": parts[0]}
    try:
        if len(parts) > 1 and parts[1]:
            item["weight"] = float(parts[1])
        if len(parts) > 2 and parts[2]:
            item["min_batch_allocation"] = float(parts[2])
        if len(parts) > 3 and parts[3]:
            item["replicas"] = int(parts[3])
    except ValueError:
        raise BadInput(f"--mix {text!r}: weight and share are numbers, replicas an integer") from None
    return item


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


def replica_names(replicas: int, prefix: str = "env") -> list[str]:
    """Process names of a run's environment workers: `env` alone, else env-1 … env-N (with `prefix`
    for another environment of the run: env-gsm8k, env-gsm8k-1 …)."""
    return [prefix] if replicas == 1 else [f"{prefix}-{i}" for i in range(1, replicas + 1)]


def mix_prefix(environment: str) -> str:
    """The process-name prefix of another environment of the run (env-<its name>, fit for a process name)."""
    slug = re.sub(r"[^a-z0-9_]+", "_", environment.split("@")[0].lower()).strip("_")[:20] or "other"
    return f"env-{slug}"


def bound_address(address: str) -> str:
    """The IPv4 address a socket given `address` binds, resolved as the socket resolves it (so `0`, `0x0`
    or a name for 0.0.0.0 are seen for what they are); an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
    the IPv4 address it maps. BadInput for an address that does not resolve, that binds every interface
    (which no worker can be told to reach and which exposes run-api, which has no authentication, on
    all of them), or that is IPv6 only (run-api, the inference server and the workers' URLs take IPv4)."""
    resolved = _resolved(address, socket.AF_INET)
    if resolved is None:
        six = _resolved(address, socket.AF_INET6)
        if six is None:
            raise BadInput(f"address {address[:100]!r} does not resolve on this machine")
        ip6 = ipaddress.IPv6Address(six)
        if ip6.ipv4_mapped is not None:
            resolved = str(ip6.ipv4_mapped)
        elif ip6.is_unspecified:
            resolved = six
        else:
            raise BadInput(
                f"address {address[:100]!r} is the IPv6 address {six}: run-api, the trainer's inference server "
                "and the workers' URLs take IPv4 addresses only",
                hint="give this machine's IPv4 address (127.0.0.1 for this machine alone)",
            )
    if ipaddress.ip_address(resolved).is_unspecified:
        raise BadInput(
            f"address {address[:100]!r} is {resolved}, every interface: it cannot be reached by workers",
            hint="give the address of this machine the workers' nodes reach (its interface on the cluster network)",
        )
    return resolved


def _resolved(address: str, family: int) -> str | None:
    """The first address of `family` that `address` resolves to (None: none), without a scope id."""
    try:
        infos = socket.getaddrinfo(address, None, family, socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return None
    return str(infos[0][4][0]).split("%", 1)[0] if infos else None
