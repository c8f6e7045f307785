"""The trainer's tokenizer, loaded without transformers when the model folder allows it.

Importing transformers costs ~5 s of CPU here, most of the trainer's start-up. A model folder
with a `tokenizer.json` (the locally built tiny model) is served by the `tokenizers` library
directly, plus jinja2 for its chat template; anything else (a hub model on Tinker cloud) goes
through the Tinker SDK's own loader. Only what the inference server needs is implemented:
encode, decode, chat_template, apply_chat_template.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from hermes_rl.core.base.fsutil import read_regular_text


class FolderTokenizer:
    def __init__(self, folder: Path):
        self.folder = folder
        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = {}
        config_path = folder / "tokenizer_config.json"
        if config_path.exists():
            config = json.loads(read_regular_text(config_path))
        template_path = folder / "chat_template.jinja"
        self.chat_template = read_regular_text(template_path) if template_path.exists() else config.get("chat_template")
        self.eos_token = config.get("eos_token")
        self._template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, messages, tokenize: bool = False, add_generation_prompt: bool = False, return_dict: bool = False, **kwargs
    ):
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template")
        if self._template is None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            self._template = env.from_string(self.chat_template)
        text = self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, eos_token=self.eos_token, **kwargs
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


def load_tokenizer(base_model: str, training_client=None):
    folder = Path(base_model)
    if (folder / "tokenizer.json").is_file():
        return FolderTokenizer(folder)
    return training_client.get_tokenizer()
