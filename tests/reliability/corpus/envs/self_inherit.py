class SelfLoop(SelfLoop):  # noqa: F821 - inherits from itself
    name = "corpus_self_loop"
