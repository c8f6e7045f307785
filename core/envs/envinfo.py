"""One environment as every client sees it (EnvInfo): an Atropos environment found by discovery or a verifiers
taskset listed by core.envs.verifiers_envs, both of which build it."""

from __future__ import annotations

from dataclasses import dataclass

from ..base.records import EnvironmentEntry


@dataclass(frozen=True)
class EnvInfo:
    name: str  # class attribute `name` (string literal), else the file stem
    class_name: str  # "" for a file that failed to parse
    file: str  # absolute path
    description: str  # first docstring line (class, else module), "" if none
    config_class: str | None  # from config_init's return annotation or `env_config_cls`
    source: str  # "project" | "user" | "tinker-atropos" | "extra"
    error: str | None = None  # why the file could not be read
    duplicate_of: str | None = None  # file of the earlier environment with the same name (that one wins)
    base_files: tuple[str, ...] = ()  # other scanned files this class inherits through (config cache keys)
    id: str = ""  # unique: the name, or name@qualifier when several environments share it
    abstract: str | None = None  # why this class is a base, not an environment to run
    root: str = ""  # the scanned folder it was found in
    imports: tuple[str, ...] = ()  # top-level modules its file imports absolutely (import roots)
    aliases: tuple[str, ...] = ()  # ids it may have been saved under before (selections, drafts)
    kind: str = "atropos"  # "atropos" (a BaseEnv file) | "verifiers" (a v1 taskset, core.envs.verifiers_envs)
    python: str = ""  # a verifiers taskset's interpreter (its own venv); "" for Atropos environments
    refused: str | None = None  # why a listed taskset cannot train here (it needs a sandbox...)

    @property
    def usable(self) -> bool:
        """Readable, so selectable and configurable; `start` also needs it not to be abstract."""
        return self.error is None

    def to_dict(self) -> EnvironmentEntry:
        return {
            "id": self.id or self.name,
            "name": self.name,
            "class_name": self.class_name,
            "file": self.file,
            "description": self.description,
            "config_class": self.config_class,
            "source": self.source,
            "error": self.error,
            "duplicate_of": self.duplicate_of,
            "abstract": self.abstract,
            "kind": self.kind,
            "python": self.python or None,
            "refused": self.refused,
        }
