"""Addresses are checked by what they bind: every spelling of "all interfaces" that a socket accepts
(`0`, `0x0`, `0.0.0.0`, `::`, `0:0::0`) is refused, as 0.0.0.0 always was; any address is resolved the
way the socket resolves it before it is used, so what is checked is what binds; and an address beyond
loopback says what it exposes."""

from __future__ import annotations

import pytest

from hermes_rl.core.base.errors import BadInput
from hermes_rl.core.runs.workers import exposure_warning, resolve_workers

pytestmark = [pytest.mark.reliability]


@pytest.mark.parametrize("spelling", ["0", "0x0", "0.0.0.0", "0.0", "::", "0:0::0", "::0"])
def test_every_spelling_of_all_interfaces_is_refused(spelling):
    with pytest.raises(BadInput, match="every interface"):
        resolve_workers({"launcher": "local", "address": spelling})


@pytest.mark.parametrize(
    ("spelling", "bound"), [("127.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("localhost", None)]
)
def test_an_address_is_recorded_as_the_socket_binds_it(spelling, bound):
    address = resolve_workers({"launcher": "local", "address": spelling})["address"]
    assert address == (bound or address) and address in ("127.0.0.1", "::1")
    assert exposure_warning({"address": address}) is None


def test_an_address_beyond_loopback_says_what_it_exposes():
    warning = exposure_warning({"address": "10.1.2.3"})
    assert "10.1.2.3" in warning and "no authentication" in warning


def test_a_name_that_does_not_resolve_is_a_clear_error():
    with pytest.raises(BadInput, match="does not resolve"):
        resolve_workers({"launcher": "local", "address": "no-such-host.invalid"})


@pytest.mark.parametrize("spelling", ["::ffff:0.0.0.0", "::ffff:0:0", "0:0:0:0:0:ffff:0.0.0.0"])
def test_an_ipv4_mapped_unspecified_address_is_every_interface(spelling):
    with pytest.raises(BadInput, match="every interface"):
        resolve_workers({"launcher": "local", "address": spelling})


def test_an_ipv4_mapped_address_is_its_ipv4_address():
    assert resolve_workers({"launcher": "local", "address": "::ffff:127.0.0.1"})["address"] == "127.0.0.1"


@pytest.mark.parametrize("spelling", ["::1", "fe80::1", "2001:db8::5"])
def test_an_ipv6_address_is_refused_with_the_reason(spelling):
    with pytest.raises(BadInput, match="IPv6 address .* IPv4 addresses only"):
        resolve_workers({"launcher": "local", "address": spelling})
