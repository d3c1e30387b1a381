"""The speed job's checkpoint: one job at a time, under the view settings it was made
with, over the speed store it wrote; and starting the speed layer over.

Spark keeps each query's state (open windows, entries waiting for an exit)
in the checkpoint, but not the settings that shaped it: restarted with other view
sizes, the job would go on from the old state without a
word and write rows of the new shape beside the old ones in the speed store,
where the serving layer would add both up. So the first start records
``Settings.views.labels`` in ``<checkpoints>/speed/view_settings.json`` and
every later start compares: :func:`claim_checkpoint` refuses a checkpoint
made under other values, before Spark starts. :func:`held_checkpoint` takes the
checkpoint's lock first: two jobs on one checkpoint would fail each other.

The checkpoint and the speed store's topics belong together. Each record the
job writes carries its micro-batch id, and the serving layer keeps a key's row
of the latest micro-batch. A new checkpoint counts its micro-batches from 0
again, so over a store written by an earlier one, its rows would lose to the
old rows of every key both wrote. :func:`claim_speed_store` refuses that
start; :func:`reset` deletes the checkpoint and the store's topics together and
creates the topics again, empty.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared.platform import topic_ids
from shared.platform.files import replace_atomically
from shared.platform.kafka_admin import records_written, require_kafka
from shared.platform.locks import LockHeldError, exclusive_lock
from shared.platform.logs import log_event
from shared.platform.topic_admin import all_topics, create_topics, delete_topics
from shared.settings import Settings, describe_view_settings

logger = logging.getLogger("lambdaline.speed")

VIEW_SETTINGS_FILE = "view_settings.json"


class CheckpointError(Exception):
    """The speed checkpoint cannot be used now; the message says why and what to do."""


def checkpoint_dir(settings: Settings) -> Path:
    """The speed job's checkpoint folder: one subfolder per query."""
    return settings.speed_checkpoint


@contextmanager
def held_checkpoint(folder: Path, view_settings: Mapping[str, str]) -> Iterator[Path]:
    """Hold the speed checkpoint (``folder``) for one job: its lock, then its view settings
    (``ViewSettings.labels``) claimed.

    Raises :class:`CheckpointError` if another job holds it or it was made under
    other view settings; yields the checkpoint folder.
    """
    with _locked(folder):
        claim_checkpoint(folder, view_settings)
        yield folder


@contextmanager
def claimed_checkpoint(settings: Settings) -> Iterator[Path]:
    """Hold the speed checkpoint of ``settings`` (:func:`held_checkpoint`) and make the
    claims a run makes before Spark starts: Kafka answers with every topic, a new
    checkpoint does not start over another's speed store (:func:`claim_speed_store`), and
    the input topics are those it first read (:func:`claim_input_topics`).

    ``lambdaline speed run`` runs the job inside it, and so do tests that run the job in
    a session of their own. Raises :class:`CheckpointError`,
    ``shared.platform.kafka_admin.KafkaNotReadyError`` or
    ``shared.platform.topic_ids.TopicsRecreatedError``; yields the checkpoint folder.
    """
    folder = checkpoint_dir(settings)
    with held_checkpoint(folder, settings.views.labels):
        require_kafka(settings.kafka, [spec.name for spec in all_topics(settings)])
        written = records_written(settings.kafka, settings.speed_topics.speed_store())
        claim_speed_store(folder, written)
        claim_input_topics(folder, topic_ids.current(settings.kafka, settings.topics.inputs()))
        yield folder


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """The checkpoint's lock, or CheckpointError if a speed job (or a reset) holds it."""
    with ExitStack() as held:
        try:
            held.enter_context(
                exclusive_lock(
                    folder.with_name(f"{folder.name}.lock"),
                    "another speed job",
                    "two jobs on one checkpoint would fail each other; stop it first, or give "
                    "this one another LAMBDALINE_STATE_DIR",
                )
            )
        except LockHeldError as error:
            raise CheckpointError(str(error)) from None
        yield


def claim_checkpoint(folder: Path, view_settings: Mapping[str, str]) -> None:
    """Record the view settings in a new checkpoint; refuse one made under others.

    Call it holding the checkpoint's lock (:func:`held_checkpoint` does).
    """
    recorded = folder / VIEW_SETTINGS_FILE
    now = dict(view_settings)
    if recorded.exists():
        try:
            made_with = json.loads(recorded.read_text(encoding="utf-8"))
        except ValueError as error:  # edited by hand: it is written whole or not at all
            raise CheckpointError(
                f"cannot read {recorded} ({error}); it should hold the checkpoint's view "
                f"settings as JSON, e.g. {json.dumps(now, sort_keys=True)}"
            ) from None
        if made_with != now:
            raise CheckpointError(_refusal(folder, made_with, now))
        return
    folder.mkdir(parents=True, exist_ok=True)
    replace_atomically(recorded, json.dumps(now, indent=2, sort_keys=True) + "\n")
    log_event(logger, "speed_checkpoint_view_settings", checkpoint=str(folder), **now)


def _refusal(folder: Path, made_with: dict[str, str], now: dict[str, str]) -> str:
    return (
        f"the speed checkpoint {folder} was made with "
        f"{describe_view_settings(made_with)}, but the settings now say "
        f"{describe_view_settings(now)}: its state and the speed store's "
        "rows follow the old values, and the job would mix them with new ones. Set the "
        "settings back, or start the speed layer over with `lambdaline speed reset` (then "
        "`lambdaline speed run` recomputes from the input topics, and the next batch run "
        "recomputes every date by itself)"
    )


STATE_STORE_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""The speed job's state store: RocksDB keeps state off the JVM heap (on local disk,
with a bounded cache), where the default HDFS-backed store keeps every version of
it in the driver's or executors' heap."""


STATE_LAYOUT = (
    "one generic operator, what a view looks back for read whole: roll-up families, "
    "plates, in slots"
)
"""How the speed job keeps its state: one ``transformWithState`` operator
(``speed_layer.operator``) that interprets the views' declarations, its roll-up and
plate state in variables of their own, each event's values in numbered slots, over two
Kafka sources (``speed_layer.job.read_whole``: Spark checks a checkpoint's count). A
checkpoint records it in :data:`STATE_LAYOUT_FILE`, with the views the operator
computes (:func:`state_layout`); one made by another layout, or for other views,
records another (or, made before layouts were recorded, nothing), and Spark cannot go
on from it."""
STATE_LAYOUT_FILE = "state_layout.txt"


def state_layout(views: Sequence[str]) -> str:
    """The layout of a checkpoint whose operator computes ``views`` (in their order: a
    view's slots and state variables follow from the views before it)."""
    return f"{STATE_LAYOUT}, of {', '.join(views)}" if views else STATE_LAYOUT


def claim_state_store(folder: Path, provider: str, views: Sequence[str] = ()) -> None:
    """Refuse a session whose state store is not RocksDB, and a checkpoint that keeps its
    state otherwise than the job does now, whose operator computes ``views``.

    The operator (``transformWithState``) runs on RocksDB only, so a checkpoint of this
    layout (:data:`STATE_LAYOUT_FILE`) holds RocksDB state; one made by another layout
    (perhaps with another provider), or for other views, cannot be gone on from.
    ``provider``: the session's. Call it holding the checkpoint.
    """
    if provider != ROCKSDB_PROVIDER:
        raise CheckpointError(
            f"the speed job keeps its state with Spark's transformWithState, which "
            f"runs on RocksDB only, but {STATE_STORE_PROVIDER_CONF} is "
            f"{provider.rsplit('.', 1)[-1] or 'unset'}: take it out of spark_conf "
            "(LAMBDALINE_SPARK_CONF)"
        )
    _claim_state_layout(folder, state_layout(views))


def _claim_state_layout(folder: Path, layout: str) -> None:
    recorded = folder / STATE_LAYOUT_FILE
    if recorded.exists():
        made_with = recorded.read_text(encoding="utf-8").strip()
    else:
        earlier = "stream-stream joins and an aggregation a view"
        made_with = earlier if checkpoint_started(folder) else layout
    if made_with != layout:
        raise CheckpointError(
            f"the speed checkpoint {folder} keeps its state as {made_with}, but the speed "
            f"job now keeps it as {layout} (docs/architecture.md), and Spark cannot go "
            "on from that state. Start the speed layer over with `lambdaline speed reset` "
            "(then `lambdaline speed run` recomputes from the input topics)"
        )
    if not recorded.exists():
        folder.mkdir(parents=True, exist_ok=True)
        replace_atomically(recorded, layout + "\n")


def claim_input_topics(folder: Path, now: Mapping[str, str]) -> None:
    """Record the input topics' ids (``now``) with a new checkpoint; raise
    :class:`shared.platform.topic_ids.TopicsRecreatedError` if one differs from what it recorded.

    Call it holding the checkpoint.
    """
    recorded = folder / topic_ids.FILE_NAME
    text = recorded.read_text(encoding="utf-8") if recorded.exists() else None
    try:
        new = topic_ids.claim(text, now, str(recorded), f"the speed checkpoint {folder}")
    except ValueError as error:  # unreadable; TopicsRecreatedError is the caller's
        raise CheckpointError(str(error)) from None
    if new is not None:
        folder.mkdir(parents=True, exist_ok=True)
        replace_atomically(recorded, new)
        log_event(logger, "speed_input_topic_ids", checkpoint=str(folder), **now)


def checkpoint_started(folder: Path) -> bool:
    """Whether any query of the checkpoint has begun a micro-batch.

    Spark logs a micro-batch's offsets before it runs it, so a checkpoint
    without any wrote nothing to the speed store.
    """
    return any(folder.glob("*/offsets/[0-9]*"))


def claim_speed_store(folder: Path, written: Mapping[str, int]) -> None:
    """Refuse to start a new checkpoint over a speed store another one wrote.

    ``written``: how many records each of the store's topics was ever given
    (``shared.platform.kafka_admin.records_written``). Call it holding the checkpoint.
    """
    if checkpoint_started(folder) or not any(written.values()):
        return
    held = ", ".join(f"{topic} ({count})" for topic, count in written.items() if count)
    raise CheckpointError(
        f"the speed checkpoint {folder} is new, but the speed store's "
        f"topics hold records of an earlier one: {held} records. A new checkpoint numbers "
        "its micro-batches from 0 again, and the API keeps each key's row of the latest "
        "micro-batch, so the earlier rows would hide the new ones. Start the speed layer "
        "over with `lambdaline speed reset` (it deletes those topics with the checkpoint), "
        "or point LAMBDALINE_STATE_DIR at the state folder whose checkpoint wrote them"
    )


@dataclass(frozen=True)
class ResetReport:
    """What :func:`reset` deleted: the checkpoint folder (if there was one) and the topics."""

    checkpoint: Path | None
    topics: list[str]


def reset(settings: Settings) -> ResetReport:
    """Start the speed layer over: delete its checkpoint, then its store's topics, and
    create those topics again, empty.

    Holds the checkpoint's lock throughout (so a running speed job is refused with
    CheckpointError) and raises KafkaNotReadyError, having deleted nothing, if the
    cluster does not answer. The checkpoint goes first: stopped half-way, what is left is a
    new checkpoint over a written store, which ``speed run`` refuses and a second
    reset finishes. The input topics and ``dead.letters`` are kept; the next
    ``speed run`` reads the input from its earliest offsets, so it writes the dead
    letters of what it reads again.
    """
    folder = checkpoint_dir(settings)
    with _locked(folder):
        require_kafka(settings.kafka)  # before anything is deleted
        had_checkpoint = folder.exists()
        if had_checkpoint:
            shutil.rmtree(folder)
        topics = settings.speed_topics.speed_store()
        deleted = delete_topics(settings.kafka, topics)
        created = {outcome.spec.name for outcome in create_topics(settings) if outcome.created}
        if not_created := [topic for topic in topics if topic not in created]:
            raise CheckpointError(
                f"deleted {', '.join(deleted)} but could not create "
                f"{', '.join(not_created)} again on {settings.kafka.bootstrap}; "
                "run `lambdaline topics create`"
            )
        log_event(
            logger, "speed_reset", checkpoint=str(folder) if had_checkpoint else None,
            topics_deleted=deleted, topics_created=sorted(created),
        )  # fmt: skip
        return ResetReport(folder if had_checkpoint else None, deleted)
