"""A spend cap per API key: the guard that follows the key check on the flow routes.

A key created with ``flownb keys create --max-spend 20`` (or capped later, ``flownb keys cap NAME
20``) may spend that many US dollars in all. :class:`KeyCaps` holds one
:class:`~flownb.providers.spend.SpendCap` per capped key in this process, its spending read from
and written to the key store's ``keys-spent.json`` as each call settles (so the cap holds across
restarts). As a guard (see :mod:`flownb.server.guarded`) it runs after the key check, reads the
accepted :class:`~flownb.server.auth.Caller` from the request's state, answers a run of a key
whose cap is used up with 402 ``spend_cap_reached`` (saying what is left), and leaves the cap in
the request's state (:data:`CAP_STATE`) for the run route, which enters :func:`spend_gate`
around each provider attempt: the rule of ``max_spend=`` (a call is sent only if what the key
spent plus the most its calls in flight could still cost stays within the cap). Listing and
describing flows cost nothing and are never refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from ..errors import ConfigError
from ..providers.calls import Gate
from ..providers.spend import SpendCap, SpendGate, check_cappable
from ..show.meter import usd
from .auth import CALLER_STATE
from .errors import ApiProblem
from .keys import KeyStore

__all__ = ["CAP_STATE", "KeyCaps", "spend_gate"]

# Where the accepted key's cap is left in the request's state (None: the key has none).
CAP_STATE = "flownb_spend_cap"


class KeyCaps:
    """The spend caps of the capped API keys of one server process (a guard)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._caps: dict[str, SpendCap] = {}

    async def __call__(self, request: Request) -> SpendCap | None:
        """Return the accepted key's cap (None: it has none), left in the request's state.

        Raises:
            ApiProblem: 402 ``spend_cap_reached``: a run of a key whose cap is used up.
        """
        caller = getattr(request.state, CALLER_STATE, None)
        cap = self.of(caller) if caller is not None else None
        setattr(request.state, CAP_STATE, cap)
        if cap is not None and request.method == "POST" and cap.left <= 0:
            raise ApiProblem(
                402,
                "spend_cap_reached",
                f"this API key's spend cap of {usd(cap.cap)} is used up ({usd(cap.spent)} "
                f"spent, {usd(cap.left)} left); raise it with: flownb keys cap NAME USD",
            )
        return cap

    def of(self, caller: Any) -> SpendCap | None:
        """Return the cap of the key ``caller`` was accepted with (None: it has none)."""
        if caller.max_spend is None:
            return None
        key_digest = caller.digest
        cap = self._caps.get(key_digest)
        if cap is None:

            def keep(spent: float) -> None:
                self.keys.record_spent(key_digest, spent)

            spent = self.keys.spent().get(key_digest, 0.0)
            cap = self._caps[key_digest] = SpendCap(caller.max_spend, spent=spent, on_spent=keep)
        cap.cap = caller.max_spend  # `flownb keys cap` may have changed it meanwhile
        return cap


def spend_gate(cap: SpendCap, flow: Any) -> Gate:
    """Return the gate keeping a served ``flow``'s calls within a key's ``cap``.

    Raises:
        ApiProblem: 402: some call of the flow cannot be priced, so it cannot be capped.
    """
    provider = flow.runner.engine.provider
    nodes = {s.name: (s.kind, s.params, s.system) for s in flow.plan.steps}
    try:
        check_cappable(provider, nodes)
    except ConfigError as exc:
        raise ApiProblem(402, "spend_cap_reached", exc.message) from None
    return SpendGate(cap, provider)
