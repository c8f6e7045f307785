"""Spell a word from a corpus installed beside the interpreter, as nltk's corpora are (hermes-rl's tests: with
the corpus missing, as wordle's is offline, it is refused at start with the reason, before any process)."""

import sys
from pathlib import Path

import verifiers.v1 as vf


class CorpusConfig(vf.TasksetConfig):
    corpus: str = "hermes-vf-words"


class CorpusTaskset(vf.Taskset[vf.Task, CorpusConfig]):
    """One word per line of the corpus; spell it backwards."""

    def load(self):
        words = (Path(sys.prefix) / "share" / self.config.corpus / "words.txt").read_text().split()
        return [vf.Task(vf.TaskData(idx=i, prompt=f"Spell {w} backwards.")) for i, w in enumerate(words)]


__all__ = ["CorpusConfig", "CorpusTaskset"]
