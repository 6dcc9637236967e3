"""verify: who says so. A record of a signed event type is acted on only when it is proven
to come from a producer the registry names (a signature of its bytes by that producer's
key): else it is dead-lettered by its position as ``unauthorized``, never under the id the
forged event names (which could shadow the real one), and it never parks the workflow it
names. A personal field may not hold a value sealed for another event, nor any other field
a sealed value at all (whoever pasted it there could not open it, and no reader may open it
on their behalf): such an event is a ``persistent`` dead letter."""

from __future__ import annotations

from dataclasses import dataclass

from chorus.base.errors import PersistentError, UnauthorizedError
from chorus.kernel.chain import Done, Finish, Item
from chorus.kernel.ports import Verifying
from chorus.kernel.steps.letters import Letters
from chorus.privacy.crypto import Sealer


@dataclass
class Verify:
    verifier: Verifying
    sealer: Sealer | None
    letters: Letters
    name: str = "verify"

    async def __call__(self, item: Item) -> Item | Done:
        env, rec = item.decoded.envelope, item.record
        try:
            self.verifier.check(env, rec.value, rec.headers)
        except UnauthorizedError as exc:
            await self.letters.record(rec, exc, parked_id=item.parked_id)
            return Done(Finish.DEAD_LETTERED)
        if self.sealer is None or item.route is None:
            return item
        unbound, misplaced = self.sealer.unbound(env), self.sealer.misplaced(env)
        if unbound or misplaced:
            why = [f"{', '.join(unbound)}: sealed for another event"] if unbound else []
            why += [f"{', '.join(misplaced)}: sealed, in a field not marked personal"] if misplaced else []
            error = PersistentError("; ".join(why))
            await self.letters.record(rec, error, parked_id=item.parked_id)
            return Done(Finish.DEAD_LETTERED)
        return item
