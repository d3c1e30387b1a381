"""The one settings model of lambdaline.

Every tunable of every layer lives here and nowhere else: window sizes, the
watermark, topic names, ports, paths. Values come, highest priority first, from
``LAMBDALINE_*`` environment variables, then ``lambdaline.toml`` in the working
directory (or the file named by ``LAMBDALINE_CONFIG``), then the defaults below.

Nested groups use ``__`` in environment names, e.g. ``LAMBDALINE_TOPICS__ENTRIES``.
Durations accept ``500ms``, ``90s``, ``5m``, ``1h``, ``3d``, a number of seconds,
or ISO-8601 (``PT5M``).

Build settings with :func:`get_settings` (cached) at the start of a command and
pass them down; nothing in the project builds settings at import time.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import pydantic_settings
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from shared.cron import check_cron

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


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` as (host, port) pairs; ValueError naming a bad one."""
    parsed = []
    for server in servers.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{server!r} is not host:port")
        parsed.append((host, int(port)))
    return parsed


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _read_pem(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None


def _empty_is_unset(value: Any) -> Any:
    # LAMBDALINE_KAFKA_SASL_USERNAME= (or any optional security setting's variable) clears a
    # value of the settings file, as unset would
    return None if value == "" else value


class TopicSettings(BaseModel):
    """Kafka topic names. Speed-store topics are ``<speed_prefix><view name>``."""

    model_config = ConfigDict(extra="forbid")

    entries: str = "toll.entries"
    exits: str = "toll.exits"
    registrations: str = "vehicle.registrations"
    dead_letters: str = "dead.letters"
    speed_prefix: str = "speed."
    speed_progress: str = "speed.progress"

    @field_validator("*")
    @classmethod
    def _valid_topic_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", value):
            raise ValueError(f"{value!r} is not a valid Kafka topic name")
        return value


class Settings(BaseSettings):
    """All settings of lambdaline, typed and validated."""

    model_config = SettingsConfigDict(
        env_prefix="LAMBDALINE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    # --- where things live -------------------------------------------------
    state_dir: Path = Field(
        Path(".lambdaline"),
        description="broker data, checkpoints, master dataset, batch store, logs, pids",
    )
    jvm_cache_dir: Path = Field(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lambdaline" / "jvm",
        description="JVM jars resolved by Maven (broker, Spark Kafka connector)",
    )

    # --- Kafka -------------------------------------------------------------
    kafka_bootstrap: str = Field(
        "127.0.0.1:9092",
        description="bootstrap servers (host:port[,host:port]); the embedded broker listens here",
    )
    kafka_controller_port: int = Field(
        9093, ge=1, le=65535, description="KRaft controller port of the embedded broker"
    )
    kafka_heap: str = Field("1g", pattern=r"^\d+[kmgKMG]$", description="broker JVM heap (-Xmx)")
    kafka_partitions: int = Field(2, ge=1, le=1024, description="partitions per created topic")
    kafka_start_timeout: Duration = Field(timedelta(seconds=90))
    kafka_timeout: Duration = Field(
        timedelta(seconds=30),
        description="how long Kafka clients (lambdaline's, Spark's sources) wait for the cluster",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="how every Kafka client (lambdaline's, Spark's sources and sinks) talks to "
        "the cluster; the embedded broker listens with the same",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism, with SASL_PLAINTEXT or SASL_SSL"
    )
    kafka_sasl_username: Annotated[str | None, BeforeValidator(_empty_is_unset)] = Field(
        None, description="SASL user name"
    )
    kafka_sasl_password: Annotated[SecretStr | None, BeforeValidator(_empty_is_unset)] = Field(
        None, description="SASL password (shown as ********** wherever settings are printed)"
    )
    kafka_ssl_cafile: Annotated[Path | None, BeforeValidator(_empty_is_unset)] = Field(
        None,
        description="PEM file of the CA certificates that sign the brokers', with SSL or "
        "SASL_SSL; none = the system's trust store (Java's for Spark)",
    )
    kafka_ssl_certfile: Annotated[Path | None, BeforeValidator(_empty_is_unset)] = Field(
        None,
        description="PEM file of the client's certificate (and its chain), for a cluster that "
        "asks for one (mutual TLS), with kafka_ssl_keyfile",
    )
    kafka_ssl_keyfile: Annotated[Path | None, BeforeValidator(_empty_is_unset)] = Field(
        None,
        description="PEM file of the client certificate's private key, in any form OpenSSL "
        "reads (Spark's clients get it as PKCS#8, see shared.pem)",
    )
    kafka_ssl_key_password: Annotated[SecretStr | None, BeforeValidator(_empty_is_unset)] = Field(
        None, description="password of kafka_ssl_keyfile, if it is encrypted"
    )
    input_retention: Duration | None = Field(
        None,
        description="retention of input and dead-letter topics; none = keep forever. Kafka "
        "ages records by their (simulated) timestamps, and the batch layer reads from here",
    )
    speed_retention: Duration = Field(
        timedelta(days=3), description="retention of speed.* topics (>= 3 batch periods)"
    )
    topics: TopicSettings = Field(default_factory=TopicSettings)

    # --- event time and view rules (shared by both layers) -------------------
    window: Duration = Field(timedelta(minutes=5), description="booth_stats tumbling window")
    max_trip: Duration = Field(timedelta(hours=1), description="longest entry->exit trip")
    watermark: Duration = Field(timedelta(minutes=2), description="speed-layer lateness bound")
    max_future_skew: Duration = Field(
        timedelta(hours=1), description="how far event time may lead the Kafka record timestamp"
    )

    # --- Spark (both layers) ----------------------------------------------------
    spark_master: str = Field(
        "local[*]", description="Spark master; spark-submit's --master overrides it"
    )
    spark_driver_memory: str = Field(
        "4g",
        pattern=r"^\d+[kmgKMG]$",
        description="driver heap (local mode: the only JVM). The speed layer's joins keep "
        "their state in it: `speed run --available-now` over a 1M-event backlog needs more "
        "than 2g",
    )
    spark_shuffle_partitions: int = Field(2, ge=1, description="spark.sql.shuffle.partitions")
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="extra Spark configuration for both layers, over each layer's own tuning, "
        'e.g. LAMBDALINE_SPARK_CONF=\'{"spark.scheduler.mode": "FIFO"}\' '
        "(spark-submit: use --conf)",
    )
    speed_trigger: Duration = Field(
        timedelta(seconds=1),
        description="micro-batch interval of the continuous speed job's booth_stats query",
    )
    speed_lookup_trigger: Duration = Field(
        timedelta(seconds=10),
        description="micro-batch interval of its other queries (lookups with dead letters, "
        "diagnostics counts), whose answers wait for the watermark or max_trip anyway",
    )
    speed_max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="cap on Kafka records per micro-batch (none = all available)"
    )

    # --- batch layer -----------------------------------------------------------
    master_dir: str | None = Field(
        None,
        description="master dataset (and its ingest checkpoint): a path or a Hadoop URL "
        "(hdfs://, s3a://) every Spark executor can reach; default <state_dir>/master",
    )
    batch_store_dir: Path | None = Field(
        None,
        description="DuckDB versions and the CURRENT pointer, on the driver and the API "
        "host; default <state_dir>/batch",
    )
    batch_keep_versions: int = Field(5, ge=1, description="published versions kept on disk")
    batch_lookback_days: int = Field(
        2, ge=0, description="days up to --date that every batch run recomputes"
    )
    batch_cron: str = Field("0 2 * * *", description="schedule of `lambdaline batch schedule`")
    batch_max_offsets_per_trigger: int | None = Field(
        1_000_000, ge=1, description="Kafka records per ingest micro-batch (none = all at once)"
    )

    # --- demo ------------------------------------------------------------------
    demo_speedup: float = Field(
        288.0,
        gt=0,
        description="simulated seconds per real second in `lambdaline demo` "
        "(288: a simulated day every 5 minutes)",
    )
    demo_traffic: float = Field(
        0.1, gt=0, description="entries per simulated second in `lambdaline demo`"
    )
    demo_batch_cron: str = Field(
        "0 1 * * *",
        description="when `lambdaline demo` runs the batch, on the simulated "
        "clock, for the simulated day before (01:00 leaves max_trip for the last exits)",
    )

    # --- serving -------------------------------------------------------------
    api_keys: Annotated[list[str], NoDecode, BeforeValidator(_split_commas)] = Field(
        default_factory=list, description="accepted X-API-Key values, comma-separated"
    )
    serving_cache_mb: int = Field(
        256, ge=0, description="per API worker: encoded batch-only results kept per batch "
        "version, least recently used dropped first (0 = no cache)",
    )  # fmt: skip
    serving_duckdb_threads: int = Field(
        1, ge=1, description="per API worker: threads of each store's DuckDB; one suits many "
        "small concurrent queries (the workers run them side by side), more help a few "
        "large roll-ups",
    )  # fmt: skip

    @field_validator("state_dir", "jvm_cache_dir", "batch_store_dir")
    @classmethod
    def _absolute_directory(cls, value: Path | None) -> Path | None:
        """Absolute, from the working directory the settings are read in, so that a path
        names the same place in every process it is handed to (the Spark driver's JVM,
        the broker, the jobs a command starts)."""
        if value is None:
            return None
        # created when first needed; a file in the way would fail later, deep in a command
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} exists and is not a directory")
        return value.absolute()

    @field_validator("master_dir")
    @classmethod
    def _absolute_location(cls, value: str | None) -> str | None:
        """A path made absolute, as the directories above; a URL (``hdfs://``) as it is."""
        if not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
            return value or None
        return str(Path(value).absolute())

    @field_validator("kafka_bootstrap")
    @classmethod
    def _valid_bootstrap(cls, value: str) -> str:
        parse_servers(value)
        return value

    @field_validator(
        "window",
        "max_trip",
        "watermark",
        "max_future_skew",
        "speed_retention",
        "kafka_timeout",
        "kafka_start_timeout",
        "input_retention",  # none keeps forever; 0 would have Kafka delete every record
        "speed_trigger",
        "speed_lookup_trigger",
    )
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("must be a positive duration")
        return value

    @field_validator("window")
    @classmethod
    def _divides_a_day(cls, value: timedelta) -> timedelta:
        # the batch layer recomputes whole days: a window must not straddle midnight
        if value > timedelta(0) and timedelta(days=1) % value != timedelta(0):
            raise ValueError("must divide a day evenly (e.g. 1m, 5m, 15m, 1h)")
        return value

    @field_validator("kafka_ssl_cafile", "kafka_ssl_certfile")
    @classmethod
    def _pem_certificates(cls, value: Path | None) -> Path | None:
        # Spark's executors get the certificates themselves (see shared.kafka_security),
        # so the file is read where settings are built, and a wrong one is named here
        if value is not None and "-----BEGIN CERTIFICATE-----" not in _read_pem(value):
            raise ValueError(f"{value} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        return value

    @field_validator("kafka_ssl_keyfile")
    @classmethod
    def _pem_key(cls, value: Path | None) -> Path | None:
        if value is not None and not re.search(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----", _read_pem(value)
        ):
            raise ValueError(f"{value} holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
        return value

    @model_validator(mode="after")
    def _security_settings_agree(self) -> Self:
        sasl, tls = self.kafka_uses_sasl, self.kafka_uses_tls
        credentials = self.kafka_sasl_username is not None or self.kafka_sasl_password is not None
        if sasl and (not self.kafka_sasl_username or self.kafka_sasl_password is None):
            raise ValueError(
                f"kafka_security_protocol {self.kafka_security_protocol} needs "
                "kafka_sasl_username and kafka_sasl_password (LAMBDALINE_KAFKA_SASL_USERNAME, "
                "LAMBDALINE_KAFKA_SASL_PASSWORD)"
            )
        if credentials and not sasl:
            raise ValueError(
                "kafka_sasl_username or kafka_sasl_password is set but kafka_security_protocol "
                f"is {self.kafka_security_protocol}, which sends no credentials; set it to "
                "SASL_SSL (or SASL_PLAINTEXT)"
            )
        tls_files = {
            name: getattr(self, name)
            for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile")
        }
        for name, path in tls_files.items():
            if path is not None and not tls:
                raise ValueError(
                    f"{name} is set but kafka_security_protocol is "
                    f"{self.kafka_security_protocol}, which uses no TLS; set it to SSL or SASL_SSL"
                )
        self._check_client_certificate()
        return self

    def _check_client_certificate(self) -> None:
        """The certificate, its key and the key's password must come together and agree."""
        certfile, keyfile = self.kafka_ssl_certfile, self.kafka_ssl_keyfile
        password = self.kafka_ssl_key_password
        if (certfile is None) != (keyfile is None):
            raise ValueError(
                "a client certificate needs both kafka_ssl_certfile and kafka_ssl_keyfile "
                "(LAMBDALINE_KAFKA_SSL_CERTFILE, LAMBDALINE_KAFKA_SSL_KEYFILE)"
            )
        if certfile is None or keyfile is None:
            if password is not None:
                raise ValueError("kafka_ssl_key_password is set but kafka_ssl_keyfile is not")
            return
        # what every client will read: a key of another certificate, a wrong password.
        # (imported here: cryptography takes ~0.1 s to import, which every command would pay)
        from shared.pem import check_pair

        check_pair(certfile, keyfile, password.get_secret_value() if password else None)

    @field_validator("batch_cron", "demo_batch_cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        return check_cron(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = config_file()
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )

    # --- derived --------------------------------------------------------------
    @property
    def kafka_uses_sasl(self) -> bool:
        """True if Kafka clients log in (SASL_PLAINTEXT, SASL_SSL)."""
        return self.kafka_security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def kafka_uses_tls(self) -> bool:
        """True if Kafka clients speak TLS (SSL, SASL_SSL)."""
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap_servers(self) -> list[tuple[str, int]]:
        """(host, port) of every bootstrap server, in the order given."""
        return parse_servers(self.kafka_bootstrap)

    @property
    def bootstrap_host(self) -> str:
        """Host of the first bootstrap server: where the embedded broker listens."""
        return self.bootstrap_servers[0][0]

    @property
    def bootstrap_port(self) -> int:
        return self.bootstrap_servers[0][1]

    @property
    def view_settings(self) -> dict[str, str]:
        """The settings that shape the views' rows, as ``duration_label`` text.

        Rows computed under other values cannot stand beside these: a batch run
        recomputes every date when they differ from the published version's,
        and the speed job refuses a checkpoint made under others.
        """
        return {"window": duration_label(self.window), "max_trip": duration_label(self.max_trip)}

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.state_dir / "checkpoints"

    @property
    def master_location(self) -> str:
        """Where the master dataset lives, as Spark reads it (path or URL, no trailing /)."""
        if self.master_dir:
            return self.master_dir.rstrip("/")
        return str(self.state_dir / "master")

    @property
    def batch_store(self) -> Path:
        return self.batch_store_dir if self.batch_store_dir else self.state_dir / "batch"


class SettingsError(Exception):
    """Settings failed validation; the message names every bad setting."""


CONFIG_ENV = "LAMBDALINE_CONFIG"
"""Names the settings file; not a setting itself."""

FAILPOINT_ENV = "LAMBDALINE_FAILPOINT"
"""Names where a batch run stops for a test to kill it (:mod:`shared.failpoints`); not a setting."""

NOT_SETTINGS = frozenset({CONFIG_ENV, FAILPOINT_ENV})
"""``LAMBDALINE_*`` variables that are read elsewhere, not by :class:`Settings`."""


def describe_view_settings(view_settings: Mapping[str, str] | None) -> str:
    """``max_trip=1h, window=5m`` (see ``Settings.view_settings``); None: not recorded."""
    if view_settings is None:
        return "view settings not recorded (before 2026-11-25)"
    return ", ".join(f"{name}={value}" for name, value in sorted(view_settings.items()))


def config_file() -> Path:
    """The settings file: ``$LAMBDALINE_CONFIG``, else ``lambdaline.toml`` here (may not exist)."""
    return Path(os.environ.get(CONFIG_ENV, "lambdaline.toml"))


def _setting_names(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every setting's dotted name, groups included: ``window``, ``topics``, ``topics.entries``."""
    names = []
    for name, field in (model or Settings).model_fields.items():
        names.append(prefix + name)
        group = field.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            names += _setting_names(group, f"{prefix}{name}.")
    return names


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """``LAMBDALINE_*`` variables that name no setting, each with a close one if any.

    pydantic-settings ignores them, so a misspelt variable would change nothing
    without a word; a misspelt key in the settings file is already an error.
    """
    known = [name.replace(".", "__").upper() for name in _setting_names()]
    problems = []
    for variable in sorted(environ):
        upper = variable.upper()
        name = upper.removeprefix("LAMBDALINE_")
        if name == upper or name in known or upper in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean LAMBDALINE_{close[0]}?" if close else ""
        problems.append(f"unknown setting {variable}: no setting has that name{hint}")
    return problems


def describe_validation_error(error: ValidationError) -> str:
    """One line per bad setting, naming its environment variable."""
    lines = []
    for problem in error.errors():
        path = [str(part) for part in problem["loc"]]
        if not path:  # a rule over several settings: its message names them
            lines.append(f"invalid settings: {problem['msg'].removeprefix('Value error, ')}")
            continue
        toml_name = ".".join(path)
        if problem["type"] == "extra_forbidden":
            # only the settings file can name a key no field has
            close = difflib.get_close_matches(toml_name, _setting_names(), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            lines.append(f"unknown setting {toml_name} in {config_file()}{hint}")
            continue
        env_name = "LAMBDALINE_" + "__".join(path).upper()
        lines.append(f"invalid setting {toml_name} ({env_name}): {problem['msg']}")
    return "\n".join(lines)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Build and validate settings once per process; raise SettingsError naming bad ones.

    Also refused: a ``LAMBDALINE_*`` variable that names no setting, a
    ``LAMBDALINE_CONFIG`` naming no file, and a settings file that is not TOML.
    """
    problems = unknown_environment(os.environ)
    if CONFIG_ENV in os.environ and not config_file().is_file():
        problems.append(f"{CONFIG_ENV} names {config_file()}, which is not a file")
    if problems:
        raise SettingsError("\n".join(problems))
    try:
        return Settings()
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None
    except pydantic_settings.SettingsError as error:  # a value that is not valid JSON
        match = re.search(r'field "([^"]+)"', str(error))
        name = match.group(1) if match else "?"
        raise SettingsError(
            f"invalid setting {name} (LAMBDALINE_{name.upper()}): not valid JSON ({error})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{config_file()} is not valid TOML: {error}") from None
