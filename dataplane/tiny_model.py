"""Build the tiny local model the offline backend trains: tokenizer, Llama-style config, warm start.

No hub access: the tokenizer is trained here with `tokenizers` on generated text (toy-task
prompts, GSM8K-style word problems, generic English), the model is initialised from a fixed
seed, then fine-tuned on the toy task with a habit: most of its training answers are one too
high. RL starts from a model that reads the operands and answers in format but whose greedy
answer is wrong; the right answer is among its samples a quarter of the time (see WarmStart).

    python -m hermes_rl.dataplane.tiny_model --out DIR      # builds if missing, with a progress display

`ensure_model(dir)` is idempotent and safe when processes race: one builds (under a file
lock) into a temporary folder that is renamed into place; a versioned marker file written
last says the folder is complete.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from hermes_rl.core.base.fsutil import file_lock, read_regular_text, write_regular_text
from hermes_rl.environments.toy_task import PROMPT_TEMPLATE, STOP, format_answer, make_problem, score

# Bump when anything below changes what gets built; older folders are rebuilt.
BUILD_VERSION = 2
MARKER_NAME = "hermes_tiny_model.json"

EOS_TOKEN = "<|endoftext|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

MODEL_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
VOCAB_TARGET = 768
SEED = 1234

TOY_MAX_OPERAND = 4


@dataclass(frozen=True)
class WarmStart:
    """How the model is fine-tuned on the toy task before RL.

    `correct_fraction` of its training answers are right and the rest are off by `habit` (the
    "one too high" habit of a model that half-learned addition). Trained to convergence, it samples
    the right answer that fraction of the time at temperature 1 but its greedy answer is the habit's:
    greedy eval starts near 0, and GRPO has a correct completion in most groups of 8 from the first
    step, so it can find and reinforce the right answers instead of discovering them (measured in
    bench/bench_training.py: the default run reaches greedy eval 0.9 within ~50 steps).
    `stop_at_p_correct` instead stops early once the right digit gets that much probability
    (the previous recipe, kept for the bench's baseline: it learns slowly).
    """

    correct_fraction: float = 0.25
    habit: int = 1
    steps: int = 400
    batch: int = 64
    learning_rate: float = 3e-3  # decays linearly to 0 over `steps`, so the build ends converged
    stop_at_p_correct: float | None = None

    def target(self, answer: int, rng: random.Random) -> int:
        return answer if rng.random() < self.correct_fraction else answer + self.habit


DEFAULT_WARM_START = WarmStart()
# The recipe of the first builds (right answers only, stopped at p(correct) 0.2); bench baseline.
EARLY_STOP_WARM_START = WarmStart(correct_fraction=1.0, habit=0, learning_rate=5e-3, stop_at_p_correct=0.2)

ProgressFn = Callable[[str, float], None]  # (stage description, fraction of the whole build done)


# --------------------------------------------------------------------------- public API


def is_complete(model_dir: Path) -> bool:
    """True when `model_dir` holds a finished build of the current version."""
    try:
        marker = json.loads(read_regular_text(Path(model_dir) / MARKER_NAME))
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("version") == BUILD_VERSION


def read_marker(model_dir: Path) -> dict:
    return json.loads(read_regular_text(Path(model_dir) / MARKER_NAME))


def ensure_model(out_dir: Path, progress: ProgressFn | None = None, recipe: WarmStart = DEFAULT_WARM_START) -> Path:
    """The built model folder at `out_dir`, building it first if missing or outdated (with `recipe`)."""
    out_dir = Path(out_dir).expanduser().resolve()
    if is_complete(out_dir):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time per folder; the others wait, then find it complete.
    with file_lock(out_dir.parent / f".{out_dir.name}"):
        if is_complete(out_dir):  # another process finished while we waited for the lock
            return out_dir
        # Builders hold the lock: a build folder found now is what an interrupted (killed) build left.
        for stale in out_dir.parent.glob(f".{out_dir.name}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
        try:
            build_into(tmp, progress, recipe)
            _install(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


# --------------------------------------------------------------------------- build steps


def build_into(folder: Path, progress: ProgressFn | None = None, recipe: WarmStart = DEFAULT_WARM_START) -> dict:
    """Build everything into `folder` (which must exist); returns the marker written last."""
    report = progress or (lambda _stage, _fraction: None)
    started = time.time()
    rng = random.Random(SEED)

    report("training tokenizer", 0.0)
    tokenizer = build_tokenizer(corpus_lines(rng))
    tokenizer.save_pretrained(folder)

    report("initialising model", 0.1)
    import torch  # noqa: PLC0415 - torch (seconds): only to build a model
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415 - torch (seconds): only to build a model

    # One thread: the model is far too small to gain from more, and on a busy 2-core machine
    # extra threads spin against each other (10x slower measured).
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        **MODEL_SHAPE,
    )
    model = LlamaForCausalLM(config)

    def on_step(step: int, loss: float) -> None:
        report(
            f"warm start on the toy task (step {step}, loss {loss:.3f})", 0.15 + 0.8 * min(step / recipe.steps, 0.99)
        )

    warm = warm_start(model, tokenizer, rng, on_step, recipe)

    report("saving", 0.95)
    model.save_pretrained(folder)
    warm["toy_score_t1"] = round(toy_score(folder, tokenizer.encode), 4)
    marker = {
        "version": BUILD_VERSION,
        "built_at": time.time(),
        "build_seconds": round(time.time() - started, 2),
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "shape": MODEL_SHAPE,
        "warm_start": warm,
    }
    # Written last: its presence means the folder is complete.
    write_regular_text(folder / MARKER_NAME, json.dumps(marker, indent=2))
    report("done", 1.0)
    return marker


def build_tokenizer(lines: list[str]):
    """Byte-level BPE (any text encodes), digits always single tokens, wrapped for transformers."""
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 - torch (seconds): only to build a model

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=[EOS_TOKEN, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(lines, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=ROLE_TOKENS,
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def corpus_lines(rng: random.Random) -> list[str]:
    """Generated text the tokenizer learns its merges from."""

    lines: list[str] = []
    for max_operand in (4, 9, 20):
        for _ in range(400):
            prompt, answer = make_problem(rng, max_operand)
            lines.append(prompt + format_answer(answer))
    for _ in range(600):
        lines.append(_word_problem(rng))
    for _ in range(600):
        lines.append(_sentence(rng))
    return lines


_NAMES = ["Natalia", "James", "Maria", "Tom", "Aisha", "Ken", "Sofia", "Liam", "Mei", "Omar", "Julie", "Carlos"]
_ITEMS = [
    "apples",
    "clips",
    "books",
    "marbles",
    "cookies",
    "pencils",
    "stickers",
    "eggs",
    "dollars",
    "miles",
    "cupcakes",
    "tickets",
    "flowers",
    "shirts",
    "minutes",
    "pages",
    "boxes",
    "cars",
]
_VERBS = ["sold", "bought", "found", "baked", "read", "collected", "gave away", "earned", "lost", "planted"]
_WHEN = ["in April", "on Monday", "last week", "each day", "in the morning", "this year", "at the fair"]
_WORDS = (
    "the of and to in is was for on that with as it at by from this be are have has had not but what all "
    "were when we there can an your which their said if do will each about how up out them then she many "
    "some so these would other into more her two like him see time could no make than first been its who "
    "now people my made over did down only way find use may water long little very after words called "
    "just where most know get through back much before go good new write our used me man too any day same "
    "right look think also around another came come work three word must because does part even place well "
    "such here take why help put different away again off went old number great tell men say small every "
    "found still between name should home big give air line set own under read last never us left end "
    "along while might next sound below saw something thought both few those always show large often "
    "together asked house world going want school important until form food keep children feet land side "
    "without boy once animal life enough took four head above kind began almost live page got earth need "
    "far hand high year mother light country father let night picture being study second soon story since "
    "white ever paper hard near sentence better best across during today however sure knew try told young "
    "sun thing whole hear example heard several change answer room sea against top turned learn point city "
    "play toward five himself usually money seen didn't car morning i'm body upon family later turn move "
    "face door cut done group true half red fish plants living wanted black eat short united run book gave "
    "order open ground cold really table remember tree course front american space inside ago "
    "question problem total cost price each per more less than twice half times left remaining"
).split()


def _word_problem(rng: random.Random) -> str:
    name, other = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    a, b = rng.randint(2, 120), rng.randint(2, 60)
    op = rng.choice(["+", "-", "*", "/"])
    if op == "+":
        question = f"{name} {rng.choice(_VERBS)} {a} {item} {rng.choice(_WHEN)}, and {b} more {rng.choice(_WHEN)}."
        result = a + b
    elif op == "-":
        a = a + b
        question = f"{name} had {a} {item}. {name} {rng.choice(_VERBS)} {b} of them to {other}."
        result = a - b
    elif op == "*":
        a, b = a % 13 + 2, b % 12 + 2
        question = f"Each of {a} boxes holds {b} {item}. {name} has all the boxes."
        result = a * b
    else:
        b = b % 9 + 2
        a = b * (a % 20 + 1)
        question = f"{name} shares {a} {item} equally among {b} friends, including {other}."
        result = a // b
    ask = rng.choice(
        [
            f"How many {item} are there in total?",
            f"How many {item} does {name} have now?",
            f"How many {item} does each friend get?",
            "What is the answer?",
        ]
    )
    work = f"{name} has {a} {op} {b} = <<{a}{op}{b}={result}>>{result} {item}."
    return f"Question: {question} {ask}\nAnswer: {work}\n#### {result}"


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 18))]
    text = " ".join(words).capitalize()
    return text + rng.choice([".", ".", ".", "?", "!"]) + (f" {rng.randint(0, 2026)}" if rng.random() < 0.2 else "")


def warm_start(
    model, tokenizer, rng: random.Random, on_step: Callable[[int, float], None], recipe: WarmStart = DEFAULT_WARM_START
) -> dict:
    """Supervised steps on `Q: a+b=\\nA: N\\n` (loss on the answer only), N as `recipe` says."""
    import torch  # noqa: PLC0415 - torch (seconds): only to build a model

    def example() -> tuple[list[int], list[int]]:
        prompt, answer = make_problem(rng, TOY_MAX_OPERAND)
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        answer_ids = tokenizer.encode(format_answer(recipe.target(answer, rng)), add_special_tokens=False)
        return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids

    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
    decay = recipe.stop_at_p_correct is None  # an early stop keeps the rate; a full schedule anneals it
    model.train()
    loss_value, probe, step = float("nan"), {}, 0
    for step in range(1, recipe.steps + 1):
        if decay:
            for group in optimizer.param_groups:
                group["lr"] = recipe.learning_rate * (1 - (step - 1) / recipe.steps)
        batch = [example() for _ in range(recipe.batch)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if step % 10 == 0:
            on_step(step, loss_value)
            if recipe.stop_at_p_correct is not None:
                model.eval()
                probe = answer_probe(model, tokenizer)
                model.train()
                if probe["p_correct_digit"] >= recipe.stop_at_p_correct:
                    break
    model.eval()
    probe = answer_probe(model, tokenizer)
    return {
        **asdict(recipe),
        "steps_done": step,
        "max_operand": TOY_MAX_OPERAND,
        "final_loss": round(loss_value, 4),
        **{key: round(value, 4) for key, value in probe.items()},
    }


def toy_score(
    model_dir: Path, encode: Callable[[str], list[int]], samples_per_problem: int = 16, temperature: float = 1.0
) -> float:
    """Mean toy_task.score of sampled answers over every toy problem (the local engine, no LoRA)."""
    import torch  # noqa: PLC0415 - torch (seconds): only to build a model

    from .tinker_local.decoding import SampleSpec, sample  # noqa: PLC0415 - the engine imports torch (seconds)
    from .tinker_local.engine import CausalLM  # noqa: PLC0415 - the same

    lm = CausalLM(model_dir)
    decode = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")).decode
    problems = [(a, b) for a in range(TOY_MAX_OPERAND + 1) for b in range(TOY_MAX_OPERAND + 1)]
    specs = [
        SampleSpec(
            prompt=encode(PROMPT_TEMPLATE.format(a=a, b=b)),
            num_samples=samples_per_problem,
            max_tokens=8,
            temperature=temperature,
            stop_strings=(STOP,),
            stop_token_ids=lm.eos_token_ids,
        )
        for a, b in problems
    ]
    results = sample(lm, specs, None, 1.0, decode=decode, generator=torch.Generator().manual_seed(SEED))
    scores = [
        score(decode(seq.tokens), a + b, TOY_MAX_OPERAND)
        for (a, b), result in zip(problems, results, strict=True)
        for seq in result.sequences
    ]
    return sum(scores) / len(scores)


def answer_probe(model, tokenizer) -> dict[str, float]:
    """Over every toy problem: the mean probability of the right answer digit, and how often the
    most likely digit is the right one (what greedy decoding answers)."""
    import torch  # noqa: PLC0415 - torch (seconds): only to build a model

    digits = [tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
    total, right, count = 0.0, 0, 0
    with torch.no_grad():
        for a in range(TOY_MAX_OPERAND + 1):
            for b in range(TOY_MAX_OPERAND + 1):
                ids = tokenizer.encode(PROMPT_TEMPLATE.format(a=a, b=b) + " ", add_special_tokens=False)
                probs = model(input_ids=torch.tensor([ids])).logits[0, -1].softmax(-1)
                total += float(probs[digits[a + b]])
                right += int(int(probs[digits].argmax()) == a + b)
                count += 1
    return {"p_correct_digit": total / count, "greedy_correct": right / count}


# --------------------------------------------------------------------------- install


def _install(built: Path, out_dir: Path) -> None:
    """Rename the finished build into place, moving an outdated or broken folder aside first."""
    if out_dir.exists():
        stale = out_dir.with_name(f".{out_dir.name}.stale-{uuid.uuid4().hex[:8]}")
        os.rename(out_dir, stale)
        shutil.rmtree(stale, ignore_errors=True)
    os.rename(built, out_dir)


# --------------------------------------------------------------------------- CLI


def progress_bar(console: Console, label: str) -> Progress:
    """A model build's bar on stderr: `label`, the stage, the share done, the time (left behind on a terminal)."""
    return Progress(
        TextColumn(f"[bold]{label}[/bold] {{task.description}}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_rl.dataplane.tiny_model", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="model folder (built if missing)")
    args = parser.parse_args(argv)
    # A stopped run ends this step with SIGTERM: exit through the build's cleanup, not around it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    console = Console(stderr=True, soft_wrap=True)
    out_dir = args.out.expanduser().resolve()
    if is_complete(out_dir):
        console.print(f"tiny model ready at {out_dir} (already built)")
        return 0
    started = time.time()
    try:
        with progress_bar(console, "tiny model") as bar:
            task = bar.add_task("starting", total=1.0)

            logged_tenths: set[int] = set()

            def progress(stage: str, fraction: float) -> None:
                bar.update(task, description=stage, completed=fraction)
                tenth = int(fraction * 10)
                if not console.is_terminal and tenth not in logged_tenths:  # a log gets ~10 lines
                    logged_tenths.add(tenth)
                    print(f"tiny model: {stage} ({fraction:.0%})", flush=True)

            ensure_model(out_dir, progress)
    except OSError as exc:
        console.print(f"[red]tiny model build failed:[/red] {exc}")
        return 1
    marker = read_marker(out_dir)
    console.print(
        f"tiny model ready at {out_dir} in {time.time() - started:.1f}s "
        f"(vocab {marker['vocab_size']}, {marker['parameters']} parameters, "
        f"p(correct digit) {marker['warm_start']['p_correct_digit']:.2f}, "
        f"greedy right {marker['warm_start']['greedy_correct']:.0%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
