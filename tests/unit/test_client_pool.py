"""core.clients.ClientPool: each client lent to one user at a time, kept when clean."""

from __future__ import annotations

import os
from itertools import count

import pytest

from quixsinks.core.clients import ClientPool


class Client:
    made = count()

    def __init__(self) -> None:
        self.id = next(self.made)
        self.closed = False
        self.usable = True

    def close(self) -> None:
        self.closed = True


def pool(max_idle: int = 2) -> ClientPool[Client]:
    return ClientPool("test clients", Client.close, alive=lambda c: c.usable, max_idle=max_idle)


def test_a_clean_client_given_back_is_lent_again() -> None:
    p = pool()
    first = p.take("k", Client)
    p.give_back("k", first, keep=True)
    assert p.take("k", Client) is first
    assert not first.closed


def test_a_client_is_lent_to_one_user_at_a_time() -> None:
    p = pool()
    a = p.take("k", Client)
    b = p.take("k", Client)  # a is still taken: a nested transaction gets its own
    assert a is not b
    p.give_back("k", a, keep=True)
    assert p.take("other key", Client) is not a


def test_a_client_not_kept_is_closed() -> None:
    p = pool()
    client = p.take("k", Client)
    p.give_back("k", client, keep=False)
    assert client.closed
    assert p.idle("k") == 0
    assert p.take("k", Client) is not client


def test_an_idle_client_no_longer_alive_is_closed_and_replaced() -> None:
    p = pool()
    dead, fine = p.take("k", Client), p.take("k", Client)
    p.give_back("k", fine, keep=True)
    p.give_back("k", dead, keep=True)
    dead.usable = False
    assert p.take("k", Client) is fine  # the dead one was tried first, closed, skipped
    assert dead.closed
    assert not fine.closed


def test_at_most_max_idle_clients_are_kept() -> None:
    p = pool(max_idle=2)
    clients = [p.take("k", Client) for _ in range(3)]
    for client in clients:
        p.give_back("k", client, keep=True)
    assert p.idle("k") == 2
    assert [c.closed for c in clients] == [False, False, True]
    p.clear()
    assert p.idle("k") == 0
    assert all(c.closed for c in clients)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_never_closes_its_parents_clients() -> None:
    p = pool()
    client = p.take("k", Client)
    p.give_back("k", client, keep=True)
    pid = os.fork()
    if pid == 0:  # the child: an empty pool, the parent's client left alone
        fresh = p.take("k", Client)
        p.clear()
        os._exit(0 if fresh is not client and not client.closed else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert p.take("k", Client) is client
