"""Warm starts, one wing: processes forked from a server that imported the heavy packages once.

- room.py: the command-line and environment room a server keeps so each fork shows its own in /proc;
- server.py: the server process (`python -m hermes_rl.core.daemons.warm.server PRELOAD…`);
- base.py: a long-lived client's warm base, which forks a run's server (`python -m …warm.base`);
- client.py: the clients: ForkServer (one short child at a time: config probes) and WarmStarts (a
  supervisor's long-lived processes), which borrow a server from the base or start their own.

Imports run one way: client -> base -> server -> room. Nothing is imported here, so `python -m` of a
module of this package loads only what that module needs.
"""
