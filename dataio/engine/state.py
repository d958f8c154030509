"""Loader checkpoints: schema 3, and the checks that run before anything is restored."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataio.exceptions import CheckpointError

__all__ = ["SCHEMA", "LoaderState", "validate_state"]

SCHEMA = 3
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class LoaderState:
    """What a loader's position is made of."""

    samples_consumed: int
    epoch: int
    seed: int
    order: str
    plan_signature: str
    record_source_signature: str
    shard: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The checkpoint dict ``state_dict()`` returns."""
        return {
            "schema": SCHEMA,
            "samples_consumed": self.samples_consumed,
            "epoch": self.epoch,
            "seed": self.seed,
            "order": self.order,
            "plan_signature": self.plan_signature,
            "record_source_signature": self.record_source_signature,
            "shard": dict(self.shard),
        }


def _count(state: Mapping[str, Any], name: str) -> int:
    value = state.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(
            f"checkpoint field {name!r} must be a non-negative integer, got {value!r}"
        )
    return value


def validate_state(state: Any, current: LoaderState, *, source_configured: bool) -> LoaderState:
    """Check a checkpoint against the running loader; return the state to restore.

    Raises:
        CheckpointError: the checkpoint is malformed, from another pipeline or source,
            from another shard layout, or a mid-epoch completion-order checkpoint.
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(
            f"a checkpoint is a dict from state_dict(), got {type(state).__name__}"
        )
    schema = state.get("schema")
    if schema not in (2, SCHEMA):
        raise CheckpointError(
            f"unsupported checkpoint schema {schema!r}; this dataio reads 2 and 3"
        )
    consumed = _count(state, "samples_consumed")
    epoch = _count(state, "epoch")
    seed = _count(state, "seed")

    source_sig = state.get("record_source_signature")
    if source_sig is not None:
        if not isinstance(source_sig, str) or not _HEX64.fullmatch(source_sig):
            raise CheckpointError(
                f"checkpoint record_source_signature is malformed ({source_sig!r:.80}); "
                "expected 64 hex digits from state_dict()"
            )
        if source_sig != current.record_source_signature:
            raise CheckpointError(
                "the checkpoint was written for another record source (its source "
                "signature differs: adapter, transforms, shuffle or composition changed); "
                "bind the same source to resume"
            )
    elif source_configured and consumed != 0:
        raise CheckpointError(
            "the checkpoint has no record_source_signature but this source has tracked "
            "configuration (transforms, shuffle or composition); only an epoch-boundary "
            "checkpoint (samples_consumed == 0) can be restored"
        )

    plan_sig = state.get("plan_signature")
    if plan_sig != current.plan_signature:
        raise CheckpointError(
            f"the checkpoint was written by another pipeline (plan signature "
            f"{str(plan_sig)[:12]!r} != {current.plan_signature[:12]!r}); resume with the same plan"
        )

    if schema == 2:
        if consumed != 0:
            raise CheckpointError(
                "a schema-2 checkpoint does not record its output order, so it can only be "
                "restored at an epoch boundary; after checking it used order='submit', set "
                "'schema': 3 and 'order': 'submit' to migrate it"
            )
        order = current.order
    else:
        order = str(state.get("order"))
        if order not in ("submit", "completion"):
            raise CheckpointError(
                f"checkpoint order must be 'submit' or 'completion', got {order!r}"
            )
        if order == "completion" and consumed != 0:
            raise CheckpointError(
                "a mid-epoch checkpoint from order='completion' cannot be resumed: the "
                "delivered samples are not a prefix of the stream; checkpoint with "
                "order='submit' or at an epoch boundary"
            )

    shard = state.get("shard", current.shard)
    if consumed != 0 and shard != current.shard:
        raise CheckpointError(
            f"the checkpoint was written by shard {shard!r} but this loader is "
            f"{current.shard!r}; resume mid-epoch with the same rank and world size"
        )
    return LoaderState(
        consumed,
        epoch,
        seed,
        order,
        current.plan_signature,
        current.record_source_signature,
        current.shard,
    )
