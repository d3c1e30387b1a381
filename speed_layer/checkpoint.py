"""The speed job's checkpoint: one job at a time, under the view settings it was made with.

Spark keeps each query's state (open windows, entries waiting for an exit)
in the checkpoint, but not the settings that shaped it: restarted with another
``window`` or ``max_trip``, the job would go on from the old state without a
word and write rows of the new shape beside the old ones in the speed store,
where the serving layer would add both up. So the first start records
``Settings.view_settings`` in ``<checkpoints>/speed/view_settings.json`` and
every later start compares: :func:`claim_checkpoint` refuses a checkpoint
made under other values, before Spark starts. :func:`held_checkpoint` takes the
checkpoint's lock first: two jobs on one checkpoint would fail each other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from shared.files import replace_atomically
from shared.locks import LockHeldError, exclusive_lock
from shared.logs import log_event
from shared.settings import Settings, describe_view_settings
from shared.topics import DIAGNOSTIC_ENTRIES, VIEW_NAMES, speed_topic

logger = logging.getLogger("lambdaline.speed")

VIEW_SETTINGS_FILE = "view_settings.json"


class CheckpointError(Exception):
    """The speed checkpoint cannot be used now; the message says why and what to do."""


def checkpoint_dir(settings: Settings) -> Path:
    """The speed job's checkpoint folder: one subfolder per query."""
    return settings.checkpoints_dir / "speed"


@contextmanager
def held_checkpoint(settings: Settings) -> Iterator[Path]:
    """Hold the speed checkpoint for one job: its lock, then its view settings claimed.

    Raises :class:`CheckpointError` if another job holds it or it was made under
    other view settings; yields the checkpoint folder.
    """
    with ExitStack() as held:
        try:
            held.enter_context(
                exclusive_lock(
                    settings.checkpoints_dir / "speed.lock",
                    "another speed job",
                    "two jobs on one checkpoint would fail each other; stop it first, or give "
                    "this one another LAMBDALINE_STATE_DIR",
                )
            )
        except LockHeldError as error:
            raise CheckpointError(str(error)) from None
        claim_checkpoint(settings)
        yield checkpoint_dir(settings)


def claim_checkpoint(settings: Settings) -> None:
    """Record the view settings in a new checkpoint; refuse one made under others.

    Call it holding the checkpoint's lock (:func:`held_checkpoint` does). A
    checkpoint made before the settings were recorded (before 2026-11-25) is
    taken to match them.
    """
    folder = checkpoint_dir(settings)
    recorded = folder / VIEW_SETTINGS_FILE
    now = settings.view_settings
    if recorded.exists():
        try:
            made_with = json.loads(recorded.read_text(encoding="utf-8"))
        except ValueError as error:  # edited by hand: it is written whole or not at all
            raise CheckpointError(
                f"cannot read {recorded} ({error}); it should hold the checkpoint's view "
                f"settings as JSON, e.g. {json.dumps(now, sort_keys=True)}"
            ) from None
        if made_with != now:
            raise CheckpointError(_refusal(settings, made_with))
        return
    folder.mkdir(parents=True, exist_ok=True)
    replace_atomically(recorded, json.dumps(now, indent=2, sort_keys=True) + "\n")
    log_event(logger, "speed_checkpoint_view_settings", checkpoint=str(folder), **now)


def _refusal(settings: Settings, made_with: dict[str, str]) -> str:
    folder = checkpoint_dir(settings)
    topics = [speed_topic(settings, view) for view in (*VIEW_NAMES, DIAGNOSTIC_ENTRIES)]
    return (
        f"the speed checkpoint {folder} was made with {describe_view_settings(made_with)}, "
        f"but the settings now say {describe_view_settings(settings.view_settings)}: its state "
        "and the speed store's rows follow the old values, and the job would mix them with "
        "new ones. Set the settings back, or start the speed layer over: stop the API, "
        f"delete {folder} and the topics {', '.join(topics)}, run `lambdaline topics create`, "
        "then `lambdaline speed run` recomputes from the input topics (the next batch run "
        "recomputes every date by itself)"
    )
