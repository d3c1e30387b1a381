"""Generations: the view definitions and view settings rows were computed with, side by side.

Changing a view (its settings or its code) cannot go on from the rows computed before:
the speed job's state and both stores follow the old definitions. So a change starts a
new *generation* beside the served one, with its own speed checkpoint, speed topics
(``Topics.of_generation``) and batch store (``Settings.batch_store``); once it has caught
up, ``ACTIVE`` is replaced and the API serves it instead, whole. Layout under the
batch store's root (``Settings.batch_store_root``)::

    ACTIVE                       JSON: the served generation (and the one served before)
    generations/0002.json        one record per generation (:class:`Generation`)
    generations/0002/            generation 2's batch store (generation 1's is the root)
    generations.lock             one generation command at a time

With no ``ACTIVE``, generation 1 is served: a store made before generations existed
is generation 1, and its record is written by the first ``lambdaline generation start``.
``ACTIVE`` is only ever replaced whole (``replace_atomically``), so every reader sees
the old generation or the new one: a process killed while promoting leaves one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.domain.events import format_instant, parse_instant
from shared.domain.topics import DERIVED_QUERY_PREFIX
from shared.domain.views import VIEW_MODULES, reaches_of
from shared.platform.batch_store import BatchVersion
from shared.platform.failpoints import failpoint
from shared.platform.files import replace_atomically
from shared.platform.locks import LockHeldError, exclusive_lock
from shared.settings import Settings, SpeedSettings, describe_view_settings
from shared.settings.views import REGISTERED, VIEW_MODULES_ENV, registered_modules

ACTIVE_FILE = "ACTIVE"
GENERATIONS_DIR = "generations"
LOCK_FILE = "generations.lock"


class GenerationError(Exception):
    """A generation cannot be used or changed as asked; the message says why and what to do."""


def module_digests(modules: Sequence[str]) -> dict[str, str]:
    """Each view module's source, as the SHA-256 of its file (what "the view's code" is)."""
    digests = {}
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise GenerationError(f"cannot find the view module {name}")
        digests[name] = hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()
    return digests


def fingerprint(digests: Mapping[str, str], view_settings: Mapping[str, str]) -> str:
    """What a generation's rows depend on, in 12 hex digits: its view modules' code (in
    order) and its view settings (``ViewSettings.labels``)."""
    document = json.dumps({"modules": list(digests.items()), "views": dict(view_settings)})
    return hashlib.sha256(document.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Generation:
    """One generation's record: what its rows are computed with, and where its speed job
    starts reading the input.

    ``replay_from``: the input a new generation's speed job reads, by record time (None:
    from the earliest offsets); ``covers_from``: the horizon from which its speed store
    holds every row, so its batch version must reach that far to be promoted."""

    number: int
    modules: tuple[str, ...]
    digests: Mapping[str, str]
    view_settings: Mapping[str, str]
    created_at: datetime
    replay_from: datetime | None = None
    covers_from: datetime | None = None
    retired_at: datetime | None = None
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", fingerprint(self.digests, self.view_settings))

    @property
    def label(self) -> str:
        return f"generation {self.number} ({self.fingerprint})"

    def describe(self) -> str:
        """Its view settings, as people read them."""
        return describe_view_settings(dict(self.view_settings))

    def to_document(self) -> dict[str, Any]:
        def instant(moment: datetime | None) -> str | None:
            return format_instant(moment) if moment is not None else None

        return {
            "generation": self.number,
            "fingerprint": self.fingerprint,
            "modules": list(self.modules),
            "digests": dict(self.digests),
            "view_settings": dict(self.view_settings),
            "created_at": instant(self.created_at),
            "replay_from": instant(self.replay_from),
            "covers_from": instant(self.covers_from),
            "retired_at": instant(self.retired_at),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Generation:
        def instant(name: str) -> datetime | None:
            text = document.get(name)
            return parse_instant(str(text)) if text else None

        created = instant("created_at")
        if created is None:
            raise ValueError("created_at is missing")
        return cls(
            number=int(document["generation"]),
            modules=tuple(str(name) for name in document["modules"]),
            digests={str(k): str(v) for k, v in dict(document["digests"]).items()},
            view_settings={str(k): str(v) for k, v in dict(document["view_settings"]).items()},
            created_at=created,
            replay_from=instant("replay_from"),
            covers_from=instant("covers_from"),
            retired_at=instant("retired_at"),
            fingerprint=str(document["fingerprint"]),
        )


def of_settings(settings: Settings, number: int, now: datetime | None = None) -> Generation:
    """A generation of what this process computes: its registered view modules (their
    code as it is now) and ``settings.views``."""
    modules = registered_modules()
    return Generation(
        number=number,
        modules=modules,
        digests=module_digests(modules),
        view_settings=settings.views.labels,
        created_at=parse_instant(format_instant(now or datetime.now(UTC))),  # as recorded
    )


@dataclass(frozen=True)
class Active:
    """``ACTIVE``: the generation the API serves, and the one it served before (what
    ``lambdaline generation rollback`` returns to)."""

    generation: int
    previous: int | None
    since: datetime

    def to_json(self) -> str:
        document = {
            "generation": self.generation,
            "previous": self.previous,
            "since": format_instant(self.since),
        }
        return json.dumps(document, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Active:
        document = json.loads(text)
        previous = document.get("previous")
        return cls(
            generation=int(document["generation"]),
            previous=int(previous) if previous is not None else None,
            since=parse_instant(str(document["since"])),
        )


FIRST = Active(generation=1, previous=None, since=datetime(1970, 1, 1, tzinfo=UTC))
"""What is served where no generation was ever promoted: generation 1."""


def record_path(root: Path, number: int) -> Path:
    return root / GENERATIONS_DIR / f"{number:04d}.json"


def read_active(root: Path) -> Active:
    """The served generation (``FIRST`` without an ``ACTIVE`` file).

    Raises :class:`GenerationError` naming the file if it cannot be read."""
    path = root / ACTIVE_FILE
    try:
        return Active.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return FIRST
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GenerationError(f"cannot read {path}: {error}") from None


def read_generations(root: Path) -> dict[int, Generation]:
    """Every generation recorded under ``root``, by number (retired ones too)."""
    found = {}
    for path in sorted((root / GENERATIONS_DIR).glob("[0-9][0-9][0-9][0-9].json")):
        try:
            generation = Generation.from_document(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise GenerationError(f"cannot read {path}: {error}") from None
        found[generation.number] = generation
    return found


def write_generation(root: Path, generation: Generation) -> None:
    path = record_path(root, generation.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, json.dumps(generation.to_document(), indent=2) + "\n")


def write_active(root: Path, active: Active) -> None:
    """Replace ``ACTIVE`` whole: every reader sees the old generation or this one."""
    failpoint("promote_before_pointer")
    root.mkdir(parents=True, exist_ok=True)
    replace_atomically(root / ACTIVE_FILE, active.to_json())


@contextmanager
def generations_lock(root: Path) -> Iterator[None]:
    """One generation command at a time (start, promote, rollback, retire)."""
    try:
        with exclusive_lock(
            root / LOCK_FILE, "another `lambdaline generation` command", "wait for it to end"
        ):
            yield
    except LockHeldError as error:
        raise GenerationError(str(error)) from None


def settings_of(settings: Settings, generation: Generation) -> Settings:
    """The settings a process computing ``generation`` runs with: its number (so its
    topics, checkpoint and batch store) and its view settings, whatever the environment
    says of those.

    Raises :class:`GenerationError` if this process registers other view modules than
    the generation's (their tables, topics and routes would not match), or if their code
    differs from what the generation was made with (its rows would mix two rules)."""
    modules = registered_modules()
    if modules != generation.modules:
        added = ",".join(name for name in generation.modules if name not in VIEW_MODULES)
        raise GenerationError(
            f"{generation.label} computes the view modules {', '.join(generation.modules)}, "
            f"but this process registers {', '.join(modules)}: run it with "
            f"{VIEW_MODULES_ENV}={added!r}"
        )
    if (now := module_digests(modules)) != dict(generation.digests):
        changed = [name for name in modules if now[name] != generation.digests.get(name)]
        raise GenerationError(
            f"{generation.label} was made with other code of {', '.join(changed)} than this "
            "checkout holds: its rows would mix two rules. Run it from the code it was made "
            "with, or start a new generation with this code (`lambdaline generation start`)"
        )
    return settings.updated(generation=generation.number, **generation.view_settings)


def generation_settings(settings: Settings, number: int | None = None) -> Settings:
    """The settings of generation ``number`` (default ``settings.generation``): its
    record's (:func:`settings_of`), or ``settings`` as they are for a generation 1 that
    was never recorded.

    Raises :class:`GenerationError` for a generation that is not recorded, or retired."""
    number = settings.generation if number is None else number
    root = settings.batch_store_root
    recorded = read_generations(root)
    if number not in recorded:
        if number == 1:
            return settings.updated(generation=1)
        raise GenerationError(
            f"no generation {number} under {root / GENERATIONS_DIR} "
            f"(recorded: {', '.join(map(str, recorded)) or 'none'}); "
            "`lambdaline generation start` starts one"
        )
    generation = recorded[number]
    if generation.retired_at is not None:
        served = read_active(root).generation
        raise GenerationError(
            f"{generation.label} was retired at {format_instant(generation.retired_at)}; "
            f"generation {served} is served (--generation {served})"
        )
    return settings_of(settings, generation)


def live(generations: Mapping[int, Generation]) -> list[Generation]:
    """The generations not retired, oldest first."""
    return [g for _, g in sorted(generations.items()) if g.retired_at is None]


def retire_record(root: Path, generation: Generation, now: datetime | None = None) -> Generation:
    retired = replace(generation, retired_at=now or datetime.now(UTC))
    write_generation(root, retired)
    return retired


def delete_batch_store(settings: Settings) -> list[Path]:
    """Delete the batch store of ``settings.generation`` (generation 1's: its versions and
    pointers, not the root's other files); returns what was deleted."""
    store = settings.batch_store
    if settings.generation != 1:
        if store.exists():
            shutil.rmtree(store)
            return [store]
        return []
    deleted = []
    for name in ("CURRENT", "ROLLED_BACK", "versions"):
        path = store / name
        if path.is_dir():
            shutil.rmtree(path)
            deleted.append(path)
        elif path.exists():
            path.unlink()
            deleted.append(path)
    return deleted


REACHES_BACK = timedelta(days=1)
"""How far before the served horizon a new generation's speed job starts reading, at
least: the batch layer computes a date's spanning rows (a window, a visit) from the days
either side, so the speed store covers the same."""


def replay_from(settings: Settings, horizon: datetime | None) -> datetime | None:
    """Where the speed job of a generation with ``settings`` starts reading its entries and
    exits, by record time, when the served horizon is ``horizon`` (None: every offset).

    Its first batch version reaches at least ``horizon``, so its speed store must hold
    every row from there on. Such a row may reach back before it: a best match's left
    event by the end of its interval (``View.reaches``: a trip's entry by ``max_trip``), a
    window or a visit by its length (:data:`REACHES_BACK` at least), and a record's time
    may trail its event's by the watermark and lead it by ``max_future_skew``. The events
    a view looks up before its left events are read that much earlier still
    (``speed_layer.job.input_starts``)."""
    if horizon is None:
        return None
    views, sizes = settings.views, settings.views.sizes
    reaches_back = max(
        REACHES_BACK,
        *(end for _, end in reaches_of(REGISTERED, sizes).values()),
        *(view.starts_before(sizes) for view in REGISTERED),
    )
    return horizon - reaches_back - views.watermark - views.max_future_skew


def chosen_settings(settings: Settings, number: int | None) -> list[Settings]:
    """The settings of each generation a command given ``--generation number`` (or not)
    works on: that one; else ``LAMBDALINE_GENERATION``'s if set; else every live one, the
    served one first (just generation 1 where none was recorded)."""
    if number is not None or settings.generation != 1:
        return [generation_settings(settings, number)]
    root = settings.batch_store_root
    recorded = live(read_generations(root))
    if not recorded:
        return [generation_settings(settings, 1)]
    served = read_active(root).generation
    ordered = sorted(recorded, key=lambda g: (g.number != served, g.number))
    return [settings_of(settings, generation) for generation in ordered]


GENERATION_HELP = (
    "the generation of the views (`lambdaline generation status`); default: "
    "LAMBDALINE_GENERATION, else 1"
)


# --- when a generation is ready to be served --------------------------------------------


@dataclass(frozen=True)
class JobFacts:
    """A generation's speed job as its progress reports show it (and, where known, its
    process)."""

    watermark: datetime | None
    lag: int | None
    """Input records its queries have not read yet (None: not every input partition is in
    a progress report yet)."""
    pid: int | None = None
    """The process holding its checkpoint on this host (None: none, or not known here)."""
    error: str | None = None
    """Why its progress could not be read."""


def aware_utc(moment: datetime | None) -> datetime | None:
    """A watermark as the speed tables hold it (zone-less UTC), as an instant."""
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def input_lag(
    reports: Mapping[str, Mapping[str, Any]], ends: Mapping[tuple[str, int], int]
) -> int | None:
    """Records of the input partitions (``ends``: each one's end offset) that the queries
    reading them have not read yet, by their latest progress reports (``reports``, by
    query): per partition, its end less the least offset a query has read it to. None if
    a partition is in no report yet. The derived queries read the speed layer's own topic."""
    read_to: dict[tuple[str, int], int] = {}
    for query, report in reports.items():
        if query.startswith(DERIVED_QUERY_PREFIX):
            continue
        for source in report.get("source_end_offsets") or []:
            for topic, partitions in source.items():
                for partition, offset in partitions.items():
                    key = (topic, int(partition))
                    read_to[key] = min(read_to.get(key, int(offset)), int(offset))
    if not ends or any(key not in read_to for key in ends):
        return None
    return sum(max(end - read_to[key], 0) for key, end in ends.items())


def waiting_for(
    generation: Generation,
    batch: BatchVersion | None,
    job: JobFacts,
    served_watermark: datetime | None,
    speed: SpeedSettings,
) -> list[str]:
    """What ``generation`` lacks before it can be served instead of the served one (whose
    speed watermark is ``served_watermark``), in words; empty: it is ready.

    It needs a published batch version reaching where its speed store starts
    (``covers_from``), a speed watermark at most ``speed_promote_watermark_gap`` behind
    the served one's, and at most ``speed_promote_max_lag`` input records left to read."""
    number = generation.number
    reasons = []
    covers = generation.covers_from
    if batch is None:
        reasons.append(f"a published batch version (`lambdaline batch run --generation {number}`)")
    elif covers is not None and batch.horizon < covers:
        reasons.append(
            f"a batch version reaching {format_instant(covers)}, where its speed store "
            f"starts (version {batch.version}'s horizon is {format_instant(batch.horizon)})"
        )
    if job.error is not None:
        reasons.append(f"its speed job's progress, which cannot be read: {job.error}")
    elif job.watermark is None:
        reasons.append("its speed job's first watermark")
    elif served_watermark is not None:
        behind = served_watermark - job.watermark
        if behind > speed.promote_watermark_gap:
            gap = speed.promote_watermark_gap.total_seconds()
            reasons.append(
                f"its speed watermark {format_instant(job.watermark)}, "
                f"{behind.total_seconds():.0f} s behind the served generation's: at most "
                f"{gap:g} s (speed_promote_watermark_gap)"
            )
    if job.error is None and job.watermark is not None and job.lag is None:
        reasons.append("its speed job's lag: a progress report of every input partition")
    elif job.lag is not None and job.lag > speed.promote_max_lag:
        reasons.append(
            f"its speed job's lag, {job.lag:,} input records: at most "
            f"{speed.promote_max_lag:,} (speed_promote_max_lag)"
        )
    return reasons
