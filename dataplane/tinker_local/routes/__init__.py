"""The local server's endpoints by area, each module a `router(ctx)` returning a FastAPI APIRouter over
the server's shared ServerContext: service (health, client config, capabilities), sessions, training
(models, forward/backward, optimizer steps, saves and loads), sampling, futures, checkpoints (the REST
catalog of training runs and saved checkpoints), billing (the tokens processed, as usage events)."""
