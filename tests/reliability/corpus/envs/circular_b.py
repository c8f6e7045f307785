from circular_a import LoopA


class LoopB(LoopA):
    name = "corpus_loop_b"
