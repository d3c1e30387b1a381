"""The values settings hold: durations as people write them, paths, servers, PEM files,
and the rules each type carries wherever a setting has it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, SecretStr

from shared.settings.cron import check_cron

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> Any:
    """Turn ``"5m"``-style text into a timedelta; leave anything else to pydantic."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    return value


def duration_label(duration: timedelta) -> str:
    """The shortest ``parse_duration`` text for a duration: ``10m``, ``1h``, ``90s``, ``1500ms``."""
    milliseconds = round(duration / timedelta(milliseconds=1))
    for unit in ("d", "h", "m", "s", "ms"):
        size = round(_UNIT_SECONDS[unit] * 1000)
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    raise AssertionError("unreachable: every whole number of milliseconds has a label")


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` as (host, port) pairs; ValueError naming a bad one."""
    parsed = []
    for server in servers.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{server!r} is not host:port")
        parsed.append((host, int(port)))
    return parsed


# --- value types: each carries its rule wherever a setting has that type --------------

V = TypeVar("V")


def if_set(rule: Callable[[V], V]) -> Callable[[V | None], V | None]:
    """``rule`` for an optional setting: None (unset) passes as it is."""
    return lambda value: None if value is None else rule(value)


def positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be a positive duration")
    return value


def divides_a_day(value: timedelta) -> timedelta:
    # the batch layer recomputes whole days: a window must not straddle midnight
    if timedelta(days=1) % value != timedelta(0):
        raise ValueError("must divide a day evenly (e.g. 1m, 5m, 15m, 1h)")
    return value


def absolute_directory(value: Path) -> Path:
    """Absolute, from the working directory the settings are read in, so that a path
    names the same place in every process it is handed to (the Spark driver's JVM,
    the broker, the jobs a command starts)."""
    # created when first needed; a file in the way would fail later, deep in a command
    if value.exists() and not value.is_dir():
        raise ValueError(f"{value} exists and is not a directory")
    return value.absolute()


def absolute_location(value: str | None) -> str | None:
    """A path made absolute, as the directories are; a URL (``hdfs://``) as it is."""
    if not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
        return value or None
    return str(Path(value).absolute())


def check_servers(value: str) -> str:
    parse_servers(value)
    return value


def split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _empty_is_unset(value: Any) -> Any:
    # LAMBDALINE_KAFKA_SASL_USERNAME= (or any optional security setting's variable) clears a
    # value of the settings file, as unset would
    return None if value == "" else value


def _read_pem(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None


def _pem_certificates(value: Path) -> Path:
    # Spark's executors get the certificates themselves (see shared.platform.kafka_security),
    # so the file is read where settings are built, and a wrong one is named here
    if "-----BEGIN CERTIFICATE-----" not in _read_pem(value):
        raise ValueError(f"{value} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return value


def _pem_key(value: Path) -> Path:
    if not re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", _read_pem(value)):
        raise ValueError(f"{value} holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(positive)]
Directory = Annotated[Path, AfterValidator(absolute_directory)]
Cron = Annotated[str, AfterValidator(check_cron)]
_Unset = BeforeValidator(_empty_is_unset)
OptionalText = Annotated[str | None, _Unset]
OptionalSecret = Annotated[SecretStr | None, _Unset]
PemCertificates = Annotated[Path | None, _Unset, AfterValidator(if_set(_pem_certificates))]
PemKey = Annotated[Path | None, _Unset, AfterValidator(if_set(_pem_key))]


def describe_view_settings(view_settings: Mapping[str, str]) -> str:
    """``max_trip=1h, window=5m`` (see ``ViewSettings.labels``)."""
    return ", ".join(f"{name}={value}" for name, value in sorted(view_settings.items()))
