"""An old-API verifiers environment (load_environment, verifiers <= 0.3)."""


def load_environment(**kwargs):
    import verifiers as vf

    return vf.SingleTurnEnv(**kwargs)
