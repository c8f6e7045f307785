"""The private interpreter APIs the data plane relies on, in one place (tests/test_dataplane_compat.py
fails loudly when a Python release changes them)."""

from __future__ import annotations

import atexit
import functools
import threading


def run_exit_hooks() -> None:
    """What a normal interpreter exit does for the program before it frees modules: the first two steps
    of Py_FinalizeEx, in its order. There is no public API for either.

    threading._shutdown: threading's own exit hooks (concurrent.futures tells its workers to end there),
    then the join of every non-daemon thread. atexit._run_exitfuncs: the atexit handlers, last registered
    first (logging.shutdown, W&B's teardown)."""
    threading._shutdown()
    atexit._run_exitfuncs()


def chat_template_returns_ids() -> None:
    """atroposlib 0.4 (tokenize_for_trainer, which many public environments use) calls
    `tokenizer.apply_chat_template(chat)` and sends the result as token ids, as transformers 4 returned
    them; transformers 5 returns a BatchEncoding unless return_dict=False, and the group then fails to
    serialize ("Object of type BatchEncoding is not JSON serializable"). In an environment process,
    a call that does not ask for a dict gets the ids again."""

    # transformers (seconds): only an environment process patches it
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase  # noqa: PLC0415

    original = PreTrainedTokenizerBase.apply_chat_template
    if getattr(original, "hermes_returns_ids", False):
        return

    @functools.wraps(original)
    def apply_chat_template(self, conversation, *args, **kwargs):
        kwargs.setdefault("return_dict", False)
        return original(self, conversation, *args, **kwargs)

    apply_chat_template.hermes_returns_ids = True
    PreTrainedTokenizerBase.apply_chat_template = apply_chat_template
