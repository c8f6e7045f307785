"""Fixture: a helper module with classes but no environment; discovery must skip it."""


class Scorer:
    def score(self, text: str) -> float:
        return float(len(text))


class NotAnEnv(Scorer):
    name = "not_an_env"
