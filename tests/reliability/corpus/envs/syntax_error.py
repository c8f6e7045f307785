from atroposlib.envs.base import BaseEnv


class BrokenEnv(BaseEnv:
    name = "corpus_syntax_error"
