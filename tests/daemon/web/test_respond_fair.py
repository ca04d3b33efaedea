"""The bcrypt queue's fairness (:class:`FairQueue`), turn by turn on a real event loop."""

from __future__ import annotations

import asyncio

from podres_exporter.daemon.web.respond import FairQueue


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_turns_go_round_robin_by_address_whatever_one_address_sends() -> None:
    """One address keeps four checks waiting and sends another after each of its turns;
    a check from a second address gets the turn after the one running, then the first
    address's next, never more than one of the flood's in between."""

    async def scenario() -> list[str]:
        queue = FairQueue(capacity=8, running=1)
        order: list[str] = []

        async def check(address: str, tag: str) -> None:
            if await queue.acquire(address):
                order.append(tag)

        tasks = [asyncio.create_task(check("flood", f"f{i}")) for i in range(5)]
        await _settle()
        tasks.append(asyncio.create_task(check("scraper", "s")))
        await _settle()
        for i in range(3):
            queue.release()
            tasks.append(asyncio.create_task(check("flood", f"more{i}")))
            await _settle()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order

    assert asyncio.run(scenario()) == ["f0", "f1", "s", "f2"]


def test_a_full_queue_makes_room_at_the_expense_of_the_address_holding_most() -> None:
    """Every place held by one address: a newcomer from another address displaces that
    address's newest waiting check (refused); one more from the flooding address is
    refused at once; a second newcomer is refused when no address holds two more."""

    async def scenario() -> dict[str, bool | None]:
        queue = FairQueue(capacity=3, running=1)
        result: dict[str, bool | None] = {}

        async def check(address: str, tag: str) -> None:
            result[tag] = None
            result[tag] = await queue.acquire(address)

        tasks = [asyncio.create_task(check("flood", f"f{i}")) for i in range(3)]
        await _settle()
        tasks.append(asyncio.create_task(check("scraper", "s")))
        await _settle()
        tasks.append(asyncio.create_task(check("flood", "f3")))
        tasks.append(asyncio.create_task(check("other", "o")))
        await _settle()
        assert queue.pending == 3
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return result

    assert asyncio.run(scenario()) == {
        "f0": True,
        "f1": None,
        "f2": False,
        "s": None,
        "f3": False,
        "o": False,
    }


def test_a_cancelled_wait_gives_its_place_and_its_turn_back() -> None:
    """A waiting check whose request goes away leaves the queue; one cancelled after it
    was given its turn passes the turn on."""

    async def scenario() -> tuple[int, bool]:
        queue = FairQueue(capacity=4, running=1)
        assert await queue.acquire("a")
        gone = asyncio.create_task(queue.acquire("b"))
        late = asyncio.create_task(queue.acquire("c"))
        await _settle()
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        pending_after_cancel = queue.pending
        queue.release()  # the turn goes to c
        await _settle()
        return pending_after_cancel, await late

    assert asyncio.run(scenario()) == (2, True)
