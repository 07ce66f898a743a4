"""A caller names the start of its container; a later start of the same host replaces the earlier."""

from __future__ import annotations

import re
import socket

from gym_compose.net.incarnation import CALLER_HEADER, Incarnations, caller_headers, this_incarnation


def test_this_process_names_its_host_and_the_start_of_process_one():
    incarnation = this_incarnation()
    assert incarnation is not None and re.fullmatch(rf"{re.escape(socket.gethostname())}@\d+", incarnation)
    assert caller_headers() == {CALLER_HEADER: incarnation}


def test_a_later_start_of_the_same_host_names_the_one_it_replaces():
    seen = Incarnations()
    assert seen.observe("agent@100") is None
    assert seen.observe("agent@100") is None
    assert seen.observe("other@5") is None
    assert seen.observe("agent@200") == "agent@100"
    assert seen.observe("agent@200") is None
    assert seen.observe(None) is None and seen.observe("no-start") is None
