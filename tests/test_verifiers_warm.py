"""The warm chat program's zygote prepares, once, what every turn of verifiers' chat program made again: its CA
bundle's SSL context and the schemas of the pydantic models it defers. Each check runs in a process of its own
(the zygote patches the `ssl` module of the process it runs in) and forks, as the zygote does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

WARM = Path(__file__).resolve().parent.parent / "dataplane" / "verifiers_warm.py"

PREAMBLE = f"""
import importlib.util, os, ssl, sys
import certifi
spec = importlib.util.spec_from_file_location("verifiers_warm", {str(WARM)!r})
warm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(warm)

def in_child(check):
    pid = os.fork()
    if pid == 0:
        try:
            check()
        except BaseException as exc:
            print(f"child: {{exc!r}}", file=sys.stderr)
            os._exit(1)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0, "the child's check failed"
"""


def _run(body: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PREAMBLE + textwrap.dedent(body)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_child_gets_its_own_ready_ssl_context_and_the_zygote_never_hands_one_out():
    _run(
        """
        fresh = ssl.create_default_context(cafile=certifi.where())
        warm._prepare_ssl_contexts()
        in_zygote = ssl.create_default_context(cafile=certifi.where())
        assert in_zygote.cert_store_stats() == fresh.cert_store_stats()
        in_zygote.check_hostname = False  # what the zygote does with its own never reaches a child

        def check():
            first = ssl.create_default_context(cafile=certifi.where())
            second = ssl.create_default_context(cafile=certifi.where())
            assert first is not second  # only the first call gets the prepared one
            for context in (first, second):
                assert context.cert_store_stats() == fresh.cert_store_stats()  # the same CA bundle, loaded
                assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
            first.check_hostname = False  # a child changes its copy: the next child never sees it

        in_child(check)

        def next_child():
            context = ssl.create_default_context(cafile=certifi.where())
            assert context.check_hostname, "a child saw another child's change"
            assert ssl.create_default_context().cert_store_stats() is not None  # other calls make their own

        in_child(next_child)
        """
    )


def test_deferred_pydantic_models_are_built_before_the_fork():
    _run(
        """
        import pydantic

        class Reply(pydantic.BaseModel):
            model_config = pydantic.ConfigDict(defer_build=True)
            text: str

        assert Reply.__pydantic_complete__ is False
        warm._complete_models()
        assert Reply.__pydantic_complete__ is True
        in_child(lambda: Reply(text="ok"))
        """
    )
