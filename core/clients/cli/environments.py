"""`hermes-rl` commands for environments, their config and profiles: envs, select, config, profile
(new, list, show). Thin wrappers over core.envs and core.runs.profile_of_run."""

from __future__ import annotations

import os
from typing import Any

from ...base.errors import BadInput
from ...base.formatting import value_text
from .output import parse_assignments, rich_console, safe, short_path


def _env_note(env) -> str:
    """How one row differs from its namesakes: the one a bare name means, a base, a broken file."""
    if env.error:
        return f"[red]cannot be read: {safe(env.error)}[/]"
    if env.abstract:
        return f"[yellow]base, not runnable ({safe(env.abstract)})[/]"
    if env.refused:
        return f"[yellow]cannot train here: {safe(env.refused)}[/]"
    return ""


def _envs_settings(args) -> Any:
    """`envs --add-folder/--add-python/--remove/--where`: the saved places, changed or shown."""
    from ...envs import envsettings
    from ...envs.discovery import environment_dirs
    from ...envs.verifiers_envs import interpreters

    said = ""
    if args.add_folder or args.add_python:
        key, path = ("folders", args.add_folder) if args.add_folder else ("pythons", args.add_python)
        full, new = envsettings.add(key, path)
        said = f"{'saved' if new else 'already saved'}: {full}"
    elif args.remove:
        envsettings.remove(args.remove)
        said = f"removed: {os.path.abspath(os.path.expanduser(args.remove))}"
    folders, folders_from = envsettings.entries("folders")
    pythons, pythons_from = envsettings.entries("pythons")
    record = {
        "settings": str(envsettings.settings_path()),
        "folders": {"paths": folders, "from": folders_from},
        "pythons": {"paths": pythons, "from": pythons_from},
        "scanned": [str(d) for _, d in environment_dirs()],
        "interpreters": interpreters()[0],
    }
    if args.json:
        return record
    console = rich_console()
    if said:
        console.print(safe(said))
    for key, (paths, source) in (("folders", (folders, folders_from)), ("pythons", (pythons, pythons_from))):
        console.print(f"{key} (from {safe(source)}): {safe(', '.join(paths)) if paths else '[dim]none[/]'}")
    for key, var in envsettings.KEYS.items():
        if os.environ.get(var, "").strip() and envsettings.saved()[0][key]:
            console.print(f"[yellow]note:[/] ${var} is set in this shell and overrides the saved {key}")
    problem = envsettings.saved()[1]
    if problem:
        console.print(f"[yellow]note:[/] {safe(problem)}")
    return None


def cmd_envs(args) -> Any:
    from ...envs.discovery import discover_environments, discovery_notices, environment_dirs, import_root

    if args.add_folder or args.add_python or args.remove or args.where:
        return _envs_settings(args)
    envs = discover_environments()
    if args.json:
        rows = []
        for env in envs:
            root = import_root(env) if env.usable and env.kind == "atropos" else None
            rows.append({**env.to_dict(), "import_root": {"root": root.root, "why": root.why} if root else None})
        return rows
    from rich.table import Table

    shared = {env.name for env in envs if env.duplicate_of}
    table = Table(box=None, header_style="bold")
    table.add_column("id", max_width=40, overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("class", no_wrap=True)
    table.add_column("description", ratio=2)
    table.add_column("file", ratio=1, overflow="fold")
    for env in envs:
        label = safe(env.id)
        if env.id == env.name and env.name in shared:
            label += " [dim](bare name)[/]"
        note = _env_note(env)
        text = safe(env.description or "")
        where = env.python if env.kind != "atropos" else env.file
        table.add_row(label, env.kind, safe(env.class_name or "-"), f"{note} {text}".strip(), safe(short_path(where)))
    console = rich_console()
    console.print(table)
    for notice in discovery_notices():
        console.print(f"[yellow]note:[/] {safe(notice)}")
    console.print("[dim]scanned: " + ", ".join(f"{safe(str(d))} ({s})" for s, d in environment_dirs()) + "[/]")
    from ...envs.verifiers_envs import interpreters

    if pythons := interpreters()[0]:
        console.print("[dim]tasksets asked of: " + ", ".join(safe(short_path(p)) for p in pythons) + "[/]")
    return None


def envs_help() -> str:
    from ...envs.discovery import ENV_PATH_VAR, TINKER_ATROPOS_VAR

    return ENVS_HELP.format(TINKER_ATROPOS_VAR=TINKER_ATROPOS_VAR, ENV_PATH_VAR=ENV_PATH_VAR, sep=os.pathsep)


ENVS_HELP = """Where environments are found, in this order (the first of a name answers to its bare name):
  1. environments/ of this project
  2. $HERMES_HOME/rl/environments/ (HERMES_HOME defaults to ~/.hermes)
  3. a tinker-atropos checkout: ${TINKER_ATROPOS_VAR} (the checkout, its tinker_atropos/ or its
     environments/ folder), else a tinker-atropos/ folder beside this project
  4. more folders: saved with --add-folder DIR (in $HERMES_HOME/rl/envs.yaml, for every client), or
     ${ENV_PATH_VAR} (separated by '{sep}'), which overrides the saved ones
  5. verifiers v1 tasksets (kind verifiers): the installed packages depending on verifiers, and verifiers'
     built-in tasksets, in each interpreter saved with --add-python PATH (or $HERMES_RL_ENV_PYTHON,
     separated by '{sep}', which overrides them) and in this one when verifiers is importable here; asked
     once per install change (docs/verifiers.md)
Every *.py below a root is read (never imported); hidden folders, caches, virtualenvs, site-packages
and node_modules are skipped, 8 levels at most.

Ids: NAME for the first of a name in the first two roots, NAME@ROOT for the others (ROOT: project,
user, tinker-atropos, or an extra folder's name, its parent's for a folder called environments),
NAME@ROOT.sub.module when one root holds several environments of a name. An id never changes when
another root is added. --json rows also carry each environment's import_root: the folder its probe
and its run put first on PYTHONPATH, and why."""


def cmd_select(args) -> Any:
    from ...envs.drafts import select_environment

    result = select_environment(args.env, profile=args.profile)
    if args.json:
        return result
    rich_console().print(
        f"selected [bold]{safe(result.get('environment'))}[/] (profile {safe(result.get('profile') or 'auto')})"
    )
    if result.get("notice"):
        rich_console().print(f"[dim]{safe(result['notice'])}[/]")
    return None


def cmd_config(args) -> Any:
    from ...envs.drafts import get_config, set_fields

    assignments = parse_assignments(args.set)
    if args.refresh:
        from ...envs.discovery import find_environment
        from ...envs.drafts import current_selection
        from ...envs.probe import clear_probe_cache
        from ...envs.profiles import resolve_profile

        name = args.env or current_selection().get("environment")
        name = name or resolve_profile(args.profile)[0].default_environment
        if not name:
            raise BadInput("no environment selected", hint="hermes-rl select ENV, or --env ENV")
        clear_probe_cache(find_environment(name), disk=True)
    if assignments:
        set_fields(assignments, env_name=args.env, profile=args.profile)
    view = get_config(args.env, profile=args.profile).to_dict()
    if args.json:
        return view
    from rich.table import Table

    console = rich_console()
    for warning in view.get("warnings") or []:
        rich_console(stderr=True).print(f"[yellow]note:[/] {safe(warning)}")
    console.print(f"environment [bold]{safe(view['environment'])}[/]  profile [bold]{safe(view['profile'])}[/]")
    editable = Table(title="editable", box=None, header_style="bold")
    for column, width in (("field", 26), ("value", 16), ("default", 16), ("type", 5)):
        editable.add_column(column, no_wrap=True, max_width=width, overflow="ellipsis")
    editable.add_column("description", ratio=1, overflow="fold")
    for field in view["editable"]:
        marker = "[yellow]*[/]" if field.get("modified") else " "
        editable.add_row(
            f"{marker}{safe(field['name'])}",
            safe(value_text(field.get("value"))),
            safe(value_text(field.get("default"))),
            safe(field.get("type", "")),
            safe(field.get("description") or ""),
        )
    console.print(editable)
    locked = Table(
        "field", "value", "why locked", title="locked: the backend", box=None, header_style="dim", style="dim"
    )
    for field in view["locked"]:
        locked.add_row(safe(field["name"]), safe(value_text(field.get("value"))), safe(field.get("reason") or ""))
    console.print(locked)
    if view.get("locked_hint"):
        console.print(f"[dim]{safe(view['locked_hint'])}[/]")
    return None


def _assignments(items: list[str] | None) -> dict[str, str]:
    """`--set a=1 b=2` and `--set a=1 --set b=2` alike."""
    return parse_assignments([item for group in items or [] for item in group])


def _profile_table(profile: dict) -> None:
    from rich.table import Table

    console = rich_console()
    console.print(
        f"profile [bold]{safe(profile['name'])}[/] ({safe(profile['backend'])}): {safe(profile['description'])}"
    )
    if profile.get("overrides_file"):
        console.print(f"  file: {safe(profile['overrides_file'])}")
    table = Table("field", "value", "what it is", box=None, header_style="bold")
    for field in profile["locked"]:
        table.add_row(safe(field["name"]), safe(value_text(field["value"])), safe(field["reason"]))
    for name, value in profile["editable_defaults"].items():
        table.add_row(safe(name), safe(value_text(value)), "training: the default; each run may change it (--set)")
    console.print(table)


def cmd_profile(args) -> Any:
    from ...envs import profile_derive
    from ...envs.profiles import get_profile

    if args.profile_action == "list":
        rows = profile_derive.profile_rows()
        if args.json:
            return rows
        from rich.table import Table

        table = Table("profile", "backend", "extends", "changes", "description", box=None, header_style="bold")
        for row in rows:
            if row.get("error"):
                table.add_row(safe(row["name"]), "", "", "", f"[red]{safe(row['error'])}[/]")
                continue
            changes = " ".join(f"{k}={value_text(v)}" for k, v in row["changes"].items())
            table.add_row(
                safe(row["name"]),
                safe(row["backend"]),
                safe(row["extends"] or ("built-in" if row["builtin"] else "")),
                safe(changes),
                safe(row["description"]),
            )
        rich_console().print(table)
        return None
    if args.profile_action == "show":
        shown = get_profile(args.name).to_dict()
        if args.json:
            return shown
        _profile_table(shown)
        return None
    # new
    if args.from_run:
        from ...runs.profile_of_run import profile_from_run

        if args.set:
            raise BadInput("--from-run takes the run's values as they were; change them afterwards with a new profile")
        profile = profile_from_run(args.from_run, args.name, description=args.description)
    else:
        assignments = _assignments(args.set)
        if not assignments:
            raise BadInput("a derived profile changes at least one value", hint="e.g. --set learning_rate=3e-4")
        profile = profile_derive.create_profile(
            args.name, args.source or "local", assignments, description=args.description
        )
    view = profile.to_dict()
    if args.json:
        return view
    rich_console().print(f"created profile [bold]{safe(profile.name)}[/] in {safe(profile.overrides_file)}")
    _profile_table(view)
    rich_console().print(f"[dim]use it: hermes-rl start --profile {safe(profile.name)}[/]")
    return None
