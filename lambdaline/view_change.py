"""A change of view settings while the demo runs (a line such as ``window=10m`` typed at it).

It runs the steps ``docs/architecture.md`` (Generations) describes, each a command of its
own: ``generation start --no-job`` with the new settings, the new generation's speed job
(supervised with the demo's other parts), its first ``batch run`` (every date, for the
simulated day before), ``generation promote --when-ready``, then the old generation's job
stopped and ``generation retire``. The API switches when ``ACTIVE`` moves; the dashboard
shows the generation served and the one catching up beside it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import ValidationError

from lambdaline.processes import CLI, Supervisor
from shared.platform.generations import read_active, read_generations
from shared.settings import Settings, describe_validation_error, environment_name

LOCK_RETRY_S = 5.0
"""How long a batch run of the new generation waits when the scheduled one holds the lock."""


def parse_change(settings: Settings, line: str) -> dict[str, str]:
    """``window=10m session_gap=20m`` as view settings by name; ValueError naming what is
    wrong (a name that is not a view size, a value the setting refuses)."""
    sizes = settings.views.sizes
    changes: dict[str, str] = {}
    for word in line.split():
        name, equals, value = word.partition("=")
        if not equals or name not in sizes:
            raise ValueError(
                f"{word!r}: type view settings as name=value, the names being {', '.join(sizes)}"
            )
        changes[name] = value
    if not changes:
        raise ValueError("nothing to change")
    try:
        settings.updated(**changes)
    except ValidationError as error:
        raise ValueError(describe_validation_error(error)) from None
    return changes


@dataclass
class ViewChange:
    """One change, carried out in a thread; :attr:`stage` says where it is."""

    settings: Settings
    supervisor: Supervisor
    changes: dict[str, str]
    day_before: Callable[[], datetime]
    """The simulated day a batch run closes now (the demo's clock)."""
    stage: str = "starting a new generation"
    finished: threading.Event = field(default_factory=threading.Event)
    failed: str | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="demo-view-change", daemon=True)
        thread.start()
        return thread

    def _command(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run ``lambdaline ARGS``; its output, or RuntimeError naming its last lines."""
        log = self.supervisor.logs / f"{self.supervisor.prefix}view-change.log"
        done = subprocess.run(
            [*CLI, *args], env={**self.supervisor.env, **(env or {})}, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, start_new_session=True,
        )  # fmt: skip
        with log.open("a") as sink:
            sink.write(f"$ lambdaline {' '.join(args)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            raise RuntimeError(f"`lambdaline {' '.join(args)}`: {done.stderr.strip()[-500:]}")
        return done.stdout

    def _run(self) -> None:
        root = self.settings.batch_store_root
        try:
            old = read_active(root).generation
            env = {environment_name(name): value for name, value in self.changes.items()}
            self._command("generation", "start", "--no-job", env=env)
            number = max(read_generations(root))
            self.stage = f"generation {number}: its speed job reads the input"
            self.supervisor.spawn(f"speed.g{number}", "speed", "run", "--generation", str(number))
            self.stage = f"generation {number}: its first batch run (every date)"
            while True:
                day = (self.day_before() - timedelta(days=1)).date().isoformat()
                try:
                    self._command(
                        "batch", "run", "--generation", str(number), "--date", day,
                        "--allow-open-day",
                    )  # fmt: skip
                    break
                except RuntimeError as error:
                    if "holds" not in str(error):  # the scheduled run has the lock
                        raise
                    time.sleep(LOCK_RETRY_S)
            self.stage = f"generation {number}: catching up, promoted once ready"
            self._command("generation", "promote", str(number), "--when-ready", "--timeout", "1h")
            self.stage = f"serving generation {number}; retiring generation {old}"
            for child in self.supervisor.children:
                if child.name == (f"speed.g{old}" if old > 1 else "speed"):
                    self.supervisor.stop(child)
            self._command("generation", "retire", str(old))
            self.stage = (
                f"serving generation {number} ({', '.join(map('='.join, self.changes.items()))})"
            )
        except RuntimeError as error:
            self.failed = str(error)
            self.stage = f"view change failed: {error}"
        finally:
            self.finished.set()
