"""Two classes that inherit from each other through two files: a cycle discovery must not follow forever."""

from circular_b import LoopB


class LoopA(LoopB):
    name = "corpus_loop_a"
