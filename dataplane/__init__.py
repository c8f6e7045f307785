"""The data plane: processes that may import torch (local Tinker server, tiny model builder, trainer)."""
