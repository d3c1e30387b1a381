"""The settings of lambdaline, in one group per part of the system.

Every tunable lives here and nowhere else: window sizes, the watermark, topic
names, ports, paths. In code they come in groups (``settings.kafka``,
``settings.spark``, ``settings.views``, ``settings.speed``, ``settings.batch``,
``settings.serving``, ``settings.demo``, ``settings.topics``), and a function
takes the group it needs. Outside, each setting has one flat name: the
``lambdaline.toml`` key and, upper-cased after ``LAMBDALINE_``, the environment
variable (``window``, ``LAMBDALINE_WINDOW``; ``kafka_bootstrap``,
``LAMBDALINE_KAFKA_BOOTSTRAP``). Topic names are a table of their own:
``[topics]`` in the file, ``LAMBDALINE_TOPICS__ENTRIES`` in the environment.

Values come, highest priority first, from the environment, then
``lambdaline.toml`` in the working directory (or the file named by
``LAMBDALINE_CONFIG``), then the defaults below. Durations accept ``500ms``,
``90s``, ``5m``, ``1h``, ``3d``, a number of seconds, or ISO-8601 (``PT5M``).

Build settings with :func:`get_settings` (cached) at the start of a command and
pass them down; nothing in the project builds settings at import time.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TypeVar

import pydantic_settings
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from shared.domain.topics import Topics, check_topic_name
from shared.domain.views import sizes_of
from shared.domain.views.view import Size, ViewSizes
from shared.settings.cron import check_cron
from shared.settings.views import REGISTERED, VIEW_MODULES_ENV, VIEW_NAMES

ENV_PREFIX = "LAMBDALINE_"

CONFIG_ENV = "LAMBDALINE_CONFIG"
"""Names the settings file; not a setting itself."""

FAILPOINT_ENV = "LAMBDALINE_FAILPOINT"
"""Names where a batch run stops for a test to kill it (:mod:`shared.platform.failpoints`);
not a setting."""

NOT_SETTINGS = frozenset({CONFIG_ENV, FAILPOINT_ENV, VIEW_MODULES_ENV})
"""``LAMBDALINE_*`` variables that are read elsewhere, not by :class:`Settings`."""

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


def _if_set(rule: Callable[[V], V]) -> Callable[[V | None], V | None]:
    """``rule`` for an optional setting: None (unset) passes as it is."""
    return lambda value: None if value is None else rule(value)


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be a positive duration")
    return value


def _divides_a_day(value: timedelta) -> timedelta:
    # the batch layer recomputes whole days: a window must not straddle midnight
    if timedelta(days=1) % value != timedelta(0):
        raise ValueError("must divide a day evenly (e.g. 1m, 5m, 15m, 1h)")
    return value


def _absolute_directory(value: Path) -> Path:
    """Absolute, from the working directory the settings are read in, so that a path
    names the same place in every process it is handed to (the Spark driver's JVM,
    the broker, the jobs a command starts)."""
    # created when first needed; a file in the way would fail later, deep in a command
    if value.exists() and not value.is_dir():
        raise ValueError(f"{value} exists and is not a directory")
    return value.absolute()


def _absolute_location(value: str | None) -> str | None:
    """A path made absolute, as the directories are; a URL (``hdfs://``) as it is."""
    if not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
        return value or None
    return str(Path(value).absolute())


def _servers(value: str) -> str:
    parse_servers(value)
    return value


def _split_commas(value: Any) -> Any:
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
PositiveDuration = Annotated[timedelta, BeforeValidator(parse_duration), AfterValidator(_positive)]
Directory = Annotated[Path, AfterValidator(_absolute_directory)]
Cron = Annotated[str, AfterValidator(check_cron)]
_Unset = BeforeValidator(_empty_is_unset)
OptionalText = Annotated[str | None, _Unset]
OptionalSecret = Annotated[SecretStr | None, _Unset]
PemCertificates = Annotated[Path | None, _Unset, AfterValidator(_if_set(_pem_certificates))]
PemKey = Annotated[Path | None, _Unset, AfterValidator(_if_set(_pem_key))]


# --- the groups ------------------------------------------------------------------------


class SettingsGroup(BaseModel):
    """The settings of one part of the system.

    A field's flat name (its key in ``lambdaline.toml``, its environment variable
    after ``LAMBDALINE_``) is the group's ``prefix`` and the field's own name,
    but for the fields in ``unprefixed``, whose flat name is their own.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    prefix: ClassVar[str] = ""
    unprefixed: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def flat_name(cls, field: str) -> str:
        return field if field in cls.unprefixed else f"{cls.prefix}{field}"


class KafkaSettings(SettingsGroup):
    """How every Kafka client (lambdaline's, Spark's sources and sinks) reaches the
    cluster, how the embedded broker runs, and how topics are created."""

    prefix: ClassVar[str] = "kafka_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"input_retention"})

    bootstrap: Annotated[str, AfterValidator(_servers)] = Field(
        "127.0.0.1:9092",
        description="bootstrap servers (host:port[,host:port]); the embedded broker listens here",
    )
    brokers: int = Field(
        1,
        ge=1,
        le=9,
        description="nodes of the embedded cluster (`kafka start`); node i listens on the "
        "bootstrap port + i - 1, and clients bootstrap from every node",
    )
    controller_port: int = Field(
        9192,
        ge=1,
        le=65535,
        description="KRaft controller port of the embedded cluster's first node (node i: + i - 1)",
    )
    heap: str = Field("1g", pattern=r"^\d+[kmgKMG]$", description="JVM heap (-Xmx) of each broker")
    partitions: int = Field(2, ge=1, le=1024, description="partitions per created topic")
    start_timeout: PositiveDuration = Field(
        timedelta(seconds=90), description="how long `kafka start` waits for the broker"
    )
    timeout: PositiveDuration = Field(
        timedelta(seconds=30),
        description="how long Kafka clients (lambdaline's, Spark's sources) wait for the cluster",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="how every Kafka client (lambdaline's, Spark's sources and sinks) talks to "
        "the cluster; the embedded broker listens with the same",
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism, with SASL_PLAINTEXT or SASL_SSL"
    )
    sasl_username: OptionalText = Field(None, description="SASL user name")
    sasl_password: OptionalSecret = Field(
        None, description="SASL password (shown as ********** wherever settings are printed)"
    )
    ssl_cafile: PemCertificates = Field(
        None,
        description="PEM file of the CA certificates that sign the brokers', with SSL or "
        "SASL_SSL; none = the system's trust store (Java's for Spark)",
    )
    ssl_certfile: PemCertificates = Field(
        None,
        description="PEM file of the client's certificate (and its chain), for a cluster that "
        "asks for one (mutual TLS), with kafka_ssl_keyfile",
    )
    ssl_keyfile: PemKey = Field(
        None,
        description="PEM file of the client certificate's private key, in any form OpenSSL "
        "reads (Spark's clients get it as PKCS#8, see shared.settings.pem)",
    )
    ssl_key_password: OptionalSecret = Field(
        None, description="password of kafka_ssl_keyfile, if it is encrypted"
    )
    input_retention: Annotated[Duration | None, AfterValidator(_if_set(_positive))] = Field(
        None,
        description="retention of input and dead-letter topics; none = keep forever. Kafka "
        "ages records by their (simulated) timestamps, and the batch layer reads from here",
    )

    @model_validator(mode="after")
    def _security_settings_agree(self) -> Self:
        sasl, tls = self.uses_sasl, self.uses_tls
        credentials = self.sasl_username is not None or self.sasl_password is not None
        if sasl and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(
                f"kafka_security_protocol {self.security_protocol} needs "
                "kafka_sasl_username and kafka_sasl_password (LAMBDALINE_KAFKA_SASL_USERNAME, "
                "LAMBDALINE_KAFKA_SASL_PASSWORD)"
            )
        if credentials and not sasl:
            raise ValueError(
                "kafka_sasl_username or kafka_sasl_password is set but kafka_security_protocol "
                f"is {self.security_protocol}, which sends no credentials; set it to "
                "SASL_SSL (or SASL_PLAINTEXT)"
            )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name) is not None and not tls:
                raise ValueError(
                    f"kafka_{name} is set but kafka_security_protocol is "
                    f"{self.security_protocol}, which uses no TLS; set it to SSL or SASL_SSL"
                )
        self._check_client_certificate()
        self._bootstrap_every_node()
        return self

    def _bootstrap_every_node(self) -> None:
        """With an embedded cluster of several nodes, clients bootstrap from all of them:
        one that bootstraps from a single node cannot start while that node is down."""
        if self.brokers == 1:
            return
        (host, port), *more = parse_servers(self.bootstrap)
        nodes = ",".join(f"{host}:{port + i}" for i in range(self.brokers))
        if more and self.bootstrap.replace(" ", "") != nodes:
            raise ValueError(
                f"kafka_brokers {self.brokers} puts the embedded cluster's nodes on {nodes}, "
                f"but kafka_bootstrap lists {self.bootstrap}: give the first node's alone"
            )
        if port + self.brokers - 1 > 65535:
            raise ValueError(f"kafka_brokers {self.brokers} from port {port} runs past 65535")
        self.bootstrap = nodes

    def _check_client_certificate(self) -> None:
        """The certificate, its key and the key's password must come together and agree."""
        certfile, keyfile, password = self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password
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
        from shared.settings.pem import check_pair

        check_pair(certfile, keyfile, password.get_secret_value() if password else None)

    @property
    def uses_sasl(self) -> bool:
        """True if Kafka clients log in (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def uses_tls(self) -> bool:
        """True if Kafka clients speak TLS (SSL, SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap_servers(self) -> list[tuple[str, int]]:
        """(host, port) of every bootstrap server, in the order given."""
        return parse_servers(self.bootstrap)

    @property
    def bootstrap_host(self) -> str:
        """Host of the first bootstrap server: where the embedded broker listens."""
        return self.bootstrap_servers[0][0]

    @property
    def bootstrap_port(self) -> int:
        return self.bootstrap_servers[0][1]


class SparkSettings(SettingsGroup):
    """Spark, for both layers."""

    prefix: ClassVar[str] = "spark_"

    master: str = Field(
        "local[*]", description="Spark master; spark-submit's --master overrides it"
    )
    driver_memory: str = Field(
        "4g",
        pattern=r"^\d+[kmgKMG]$",
        description="driver heap (local mode: the only JVM). The speed layer's joins keep "
        "their state in it: `speed run --available-now` over a 1M-event backlog needs more "
        "than 2g",
    )
    shuffle_partitions: int = Field(2, ge=1, description="spark.sql.shuffle.partitions")
    workers: int = Field(
        2, ge=1, le=8, description="workers of the standalone cluster `spark start` runs"
    )
    worker_cores: int = Field(
        2, ge=1, le=64, description="cores each worker offers executors (may exceed the host's)"
    )
    worker_memory: str = Field(
        "2g",
        pattern=r"^\d+[mgMG]$",
        description="memory each worker offers executors (each executor takes "
        "spark.executor.memory, 1g by default)",
    )
    cluster_port: int = Field(
        7077, ge=1, le=65535, description="port of the standalone master `spark start` runs"
    )
    cluster_ui_port: int = Field(
        8080,
        ge=1,
        le=65535,
        description="the standalone master's web UI (and JSON) port; worker i's is + i",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="extra Spark configuration for both layers, over each layer's own tuning, "
        'e.g. LAMBDALINE_SPARK_CONF=\'{"spark.scheduler.mode": "FIFO"}\' '
        "(spark-submit: use --conf)",
    )


class _ViewSettings(SettingsGroup):
    """Event time, validation, and the views' sizes (one field per
    ``shared.domain.views.view.Size`` of the registered views), the same in both layers."""

    watermark: PositiveDuration = Field(
        timedelta(minutes=2), description="speed-layer lateness bound"
    )
    max_future_skew: PositiveDuration = Field(
        timedelta(hours=1), description="how far event time may lead the Kafka record timestamp"
    )
    dead_letter_bytes: int = Field(
        4096,
        ge=16,
        le=65536,
        description="leading bytes of a record's key and of its value a dead letter keeps "
        "(with their full length and SHA-256)",
    )

    @model_validator(mode="after")
    def _sizes_go_together(self) -> Self:
        sizes = self.sizes
        for view in REGISTERED:
            if view.check_sizes is not None:
                view.check_sizes(sizes)
        return self

    @property
    def sizes(self) -> ViewSizes:
        """The durations the view functions take, by name."""
        return {size.name: getattr(self, size.name) for size in VIEW_SIZES}

    @property
    def labels(self) -> dict[str, str]:
        """The settings that shape the views' rows, as ``duration_label`` text.

        Rows computed under other values cannot stand beside these: a batch run
        recomputes every date when they differ from the published version's,
        and the speed job refuses a checkpoint made under others.
        """
        return {name: duration_label(value) for name, value in self.sizes.items()}


def _size_field(size: Size) -> tuple[Any, Any]:
    kind = (
        Annotated[PositiveDuration, AfterValidator(_divides_a_day)]
        if size.divides_a_day
        else PositiveDuration
    )
    return kind, Field(size.default, description=size.description)


VIEW_SIZES = sizes_of(REGISTERED)
"""Every size the registered views read, each a setting of :class:`ViewSettings`."""

if TYPE_CHECKING:
    ViewSettings = _ViewSettings
else:
    ViewSettings = create_model(
        "ViewSettings",
        __base__=_ViewSettings,
        __doc__=_ViewSettings.__doc__,
        **{size.name: _size_field(size) for size in VIEW_SIZES},
    )


class SpeedSettings(SettingsGroup):
    """The speed layer's job and its store's topics."""

    prefix: ClassVar[str] = "speed_"

    trigger: PositiveDuration = Field(
        timedelta(seconds=1),
        description="micro-batch interval of the continuous speed job's booths query "
        "(the booth lane and the fresh views' own queries)",
    )
    lookup_trigger: PositiveDuration = Field(
        timedelta(seconds=2),
        description="micro-batch interval of its lookups query (trip and registration "
        "candidates, dead letters) and vehicle_visits: a trip is served about this long "
        "after its exit at worst",
    )
    diagnostics_trigger: PositiveDuration = Field(
        timedelta(seconds=10),
        description="micro-batch interval of its diagnostics count, whose rows wait for the "
        "watermark or max_trip anyway",
    )
    max_offsets_per_trigger: int | None = Field(
        None, ge=1, description="cap on Kafka records per micro-batch (none = all available)"
    )
    retention: PositiveDuration = Field(
        timedelta(days=3), description="retention of speed.* topics (>= 3 batch periods)"
    )


class BatchSettings(SettingsGroup):
    """The batch layer: where the master dataset and the published versions live, and
    what a run recomputes."""

    prefix: ClassVar[str] = "batch_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"master_dir"})

    master_dir: Annotated[str | None, AfterValidator(_absolute_location)] = Field(
        None,
        description="master dataset (and its ingest checkpoint): a path or a Hadoop URL "
        "(hdfs://, s3a://) every Spark executor can reach; default <state_dir>/master",
    )
    store_dir: Annotated[Path | None, AfterValidator(_if_set(_absolute_directory))] = Field(
        None,
        description="DuckDB versions and the CURRENT pointer, on the driver and the API "
        "host; default <state_dir>/batch",
    )
    keep_versions: int = Field(5, ge=1, description="published versions kept on disk")
    lookback_days: int = Field(
        2, ge=0, description="days up to --date that every batch run recomputes"
    )
    cron: Cron = Field("0 2 * * *", description="schedule of `lambdaline batch schedule`")
    max_offsets_per_trigger: int | None = Field(
        1_000_000, ge=1, description="Kafka records per ingest micro-batch (none = all at once)"
    )


class ServingSettings(SettingsGroup):
    """The API: who may ask, and what each worker keeps."""

    prefix: ClassVar[str] = "serving_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"api_keys"})

    api_keys: Annotated[list[str], NoDecode, BeforeValidator(_split_commas)] = Field(
        default_factory=list, description="accepted X-API-Key values, comma-separated"
    )
    cache_mb: int = Field(
        256, ge=0, description="per API worker: encoded batch-only results kept per batch "
        "version, least recently used dropped first (0 = no cache)",
    )  # fmt: skip
    duckdb_threads: int = Field(
        1, ge=1, description="per API worker: threads of each store's DuckDB; one suits many "
        "small concurrent queries (the workers run them side by side), more help a few "
        "large roll-ups",
    )  # fmt: skip
    after_wait: PositiveDuration = Field(
        timedelta(seconds=5), description="longest a request with `after=` waits for its "
        "worker to materialise what the token names before answering 409",
    )  # fmt: skip
    sql_timeout: PositiveDuration = Field(
        timedelta(seconds=10), description="longest a `POST /v1/sql` query runs before it "
        "is interrupted (400)",
    )  # fmt: skip
    sql_rows: int = Field(
        10_000, ge=1, le=1_000_000, description="most rows a `POST /v1/sql` answer holds "
        "(its `truncated` says if there were more)",
    )  # fmt: skip
    sql_memory_mb: int = Field(
        256, ge=16, description="per API worker: DuckDB memory limit of the `POST /v1/sql` "
        "sandbox (a query needing more fails; nothing spills to disk)",
    )  # fmt: skip
    stream_buffer: int = Field(
        10_000, ge=1, description="per API worker: `GET /v1/stream` events kept for a "
        "client resuming with `Last-Event-ID` (an older id gets `reset`)",
    )  # fmt: skip
    stream_queue: int = Field(
        10_000, ge=1, description="`GET /v1/stream`: a client this many events behind when "
        "more arrive is disconnected (at most `stream_buffer`: the log is its queue)",
    )  # fmt: skip
    stream_heartbeat: PositiveDuration = Field(
        timedelta(seconds=15), description="how often `GET /v1/stream` sends a `heartbeat` "
        "event (the speed layer's status)",
    )  # fmt: skip
    stream_clients: int = Field(
        500, ge=1, description="per API worker: most `GET /v1/stream` clients at once (one "
        "more gets 503)",
    )  # fmt: skip
    sql_concurrency: int = Field(
        4, ge=1, description="per API worker: most `POST /v1/sql` queries running at once "
        "(one more gets 429 with Retry-After)",
    )  # fmt: skip
    sql_answer_mb: int = Field(
        16, ge=1, description="most megabytes of rows a `POST /v1/sql` answer holds (its "
        "`truncated` says if there were more)",
    )  # fmt: skip
    rate_per_key: float = Field(
        1000.0, gt=0, description="per API worker: requests a second each X-API-Key may make "
        "(bursts of one second's worth; more get 429 with Retry-After)",
    )  # fmt: skip
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="most bytes of a request body (a larger one gets "
        "413 before it is read)",
    )  # fmt: skip
    max_url_bytes: int = Field(
        16384, ge=256, description="most bytes of a request's path and query (a longer one "
        "gets 414)",
    )  # fmt: skip
    max_header_bytes: int = Field(
        32768, ge=1024, description="most bytes of a request's headers together (more get "
        "431)",
    )  # fmt: skip
    token_bytes: int = Field(
        8192, ge=256, description="most bytes of an `after=` consistency token or a "
        "`Last-Event-ID` (a longer one gets 422)",
    )  # fmt: skip
    token_partitions: int = Field(
        1024, ge=1, description="most partitions an `after=` token or a `Last-Event-ID` names "
        "(more get 422)",
    )  # fmt: skip


class DemoSettings(SettingsGroup):
    """`lambdaline demo`'s simulated clock and traffic."""

    prefix: ClassVar[str] = "demo_"

    speedup: float = Field(
        288.0,
        gt=0,
        description="simulated seconds per real second in `lambdaline demo` "
        "(288: a simulated day every 5 minutes)",
    )
    traffic: float = Field(
        0.1, gt=0, description="entries per simulated second in `lambdaline demo`"
    )
    batch_cron: Cron = Field(
        "0 1 * * *",
        description="when `lambdaline demo` runs the batch, on the simulated "
        "clock, for the simulated day before (01:00 leaves max_trip for the last exits)",
    )


TopicName = Annotated[str, AfterValidator(check_topic_name)]


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class TopicNames(Topics):
    """The topics as settings read them: :class:`shared.domain.topics.Topics`, each name
    checked where it is given (so an error names ``LAMBDALINE_TOPICS__ENTRIES``)."""

    entries: Annotated[TopicName, Field(description="the entries")] = Topics.entries
    exits: Annotated[TopicName, Field(description="the exits")] = Topics.exits
    registrations: Annotated[TopicName, Field(description="the registrations")] = (
        Topics.registrations
    )
    dead_letters: Annotated[
        TopicName, Field(description="the records validation refused, with the reason")
    ] = Topics.dead_letters
    speed_prefix: Annotated[
        TopicName, Field(description="of the speed store's topics, one per view")
    ] = Topics.speed_prefix
    speed_progress: Annotated[TopicName, Field(description="the speed job's progress reports")] = (
        Topics.speed_progress
    )

    def speed_store(self, views: Iterable[str] = VIEW_NAMES) -> list[str]:
        """The speed store's topics (``Topics.speed_store``), of every registered view."""
        return super().speed_store(views)


def _topic_names(value: Any) -> Any:
    """A plain :class:`Topics` given (a test's, a command's) as its fields, to be read."""
    if isinstance(value, Topics) and not isinstance(value, TopicNames):
        return dataclasses.asdict(value)
    return value


def _default_jvm_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lambdaline" / "jvm"


class Settings(BaseModel):
    """All settings of lambdaline, typed, validated and grouped.

    Built from flat names as well (``Settings(window="10m", api_keys=["k"])``),
    which go to their groups, as the settings file and the environment name them.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)

    state_dir: Directory = Field(
        Path(".lambdaline"),
        description="broker data, checkpoints, master dataset, batch store, logs, pids",
    )
    jvm_cache_dir: Directory = Field(
        default_factory=_default_jvm_cache_dir,
        description="JVM jars resolved by Maven (broker, Spark Kafka connector); default "
        "$XDG_CACHE_HOME/lambdaline/jvm",
    )
    topics: Annotated[TopicNames, BeforeValidator(_topic_names)] = Field(default_factory=TopicNames)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    views: ViewSettings = Field(default_factory=ViewSettings)
    speed: SpeedSettings = Field(default_factory=SpeedSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    demo: DemoSettings = Field(default_factory=DemoSettings)

    @model_validator(mode="before")
    @classmethod
    def _flat_names_to_groups(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        grouped = {name: value for name, value in data.items() if name not in FLAT_NAMES}
        for name, value in data.items():
            if name in FLAT_NAMES:
                group, field = FLAT_NAMES[name]
                held = grouped.get(group)
                fields = held.model_dump() if isinstance(held, BaseModel) else dict(held or {})
                grouped[group] = {**fields, field: value}
        return grouped

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name (the settings file's keys), groups opened up."""
        values: dict[str, Any] = {}
        for flat_name, group, field in _flat_layout():
            holder = self if group is None else getattr(self, group)
            values[flat_name] = getattr(holder, field)
        return values

    def updated(self, **changes: Any) -> Settings:
        """These settings with some changed (by flat name, or a whole group), validated."""
        # a whole group replaces its own flat names, which would otherwise win over it
        kept = {
            name: value
            for name, value in self.flat().items()
            if name not in FLAT_NAMES or FLAT_NAMES[name][0] not in changes
        }
        return Settings.model_validate({**kept, **changes})

    # --- where things live, derived ----------------------------------------------------
    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def spark_cluster_dir(self) -> Path:
        return self.state_dir / "spark-cluster"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.state_dir / "checkpoints"

    @property
    def master_location(self) -> str:
        """Where the master dataset lives, as Spark reads it (path or URL, no trailing /)."""
        if self.batch.master_dir:
            return self.batch.master_dir.rstrip("/")
        return str(self.state_dir / "master")

    @property
    def batch_store(self) -> Path:
        return self.batch.store_dir if self.batch.store_dir else self.state_dir / "batch"


GROUPS: Mapping[str, type[SettingsGroup]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, SettingsGroup)
}
"""The groups of :class:`Settings` by attribute name: ``kafka``, ``spark``, ``views``, ..."""


def _flat_layout() -> Iterator[tuple[str, str | None, str]]:
    """(flat name, group or None, field) of every setting, in declaration order."""
    for name in Settings.model_fields:
        group = GROUPS.get(name)
        if group is None:
            yield name, None, name
            continue
        for field in group.model_fields:
            yield group.flat_name(field), name, field


FLAT_NAMES: Mapping[str, tuple[str, str]] = {
    flat_name: (group, field) for flat_name, group, field in _flat_layout() if group is not None
}
"""A grouped setting's (group, field) by its flat name: ``window`` -> (``views``, ``window``)."""


def setting_field(flat_name: str) -> FieldInfo:
    """The declaration (type, default, description) of a setting, by its flat name
    (``topics.entries`` included)."""
    if flat_name in FLAT_NAMES:
        group, field = FLAT_NAMES[flat_name]
        return GROUPS[group].model_fields[field]
    if flat_name.startswith("topics."):
        fields: dict[str, FieldInfo] = TopicNames.__pydantic_fields__  # type: ignore[attr-defined]
        return fields[flat_name.removeprefix("topics.")]
    return Settings.model_fields[flat_name]


# --- reading the environment and the settings file --------------------------------------


def config_file() -> Path:
    """The settings file: ``$LAMBDALINE_CONFIG``, else ``lambdaline.toml`` here (may not exist)."""
    return Path(os.environ.get(CONFIG_ENV, "lambdaline.toml"))


class _FlatSources(BaseSettings):
    """Reads settings by their flat names, from the environment and then the settings file."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file()))


_FlatSettings: type[_FlatSources] = create_model(  # type: ignore[call-overload]
    "_FlatSettings",
    __base__=_FlatSources,
    **{
        flat_name: (setting_field(flat_name).annotation, copy.copy(setting_field(flat_name)))
        for flat_name, _, _ in _flat_layout()
    },
)
"""One field per flat name, each declared as its group declares it: what pydantic-settings
reads the environment and the file with."""


def read_settings() -> Settings:
    """Settings from the environment, the settings file and the defaults (not cached)."""
    flat = _FlatSettings()
    return Settings.model_validate({name: getattr(flat, name) for name in flat.model_fields_set})


class SettingsError(Exception):
    """Settings failed validation; the message names every bad setting."""


def describe_view_settings(view_settings: Mapping[str, str]) -> str:
    """``max_trip=1h, window=5m`` (see ``ViewSettings.labels``)."""
    return ", ".join(f"{name}={value}" for name, value in sorted(view_settings.items()))


def setting_names() -> list[str]:
    """Every setting's name as the settings file writes it: ``window``, ``topics``,
    ``topics.entries``, ``kafka_bootstrap``."""
    names = []
    for flat_name, _, _ in _flat_layout():
        names.append(flat_name)
        if flat_name == "topics":
            names += [f"topics.{field.name}" for field in dataclasses.fields(Topics)]
    return names


def environment_name(name: str) -> str:
    """A setting's environment variable: ``LAMBDALINE_`` and its name, ``.`` as ``__``."""
    return ENV_PREFIX + name.replace(".", "__").upper()


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """``LAMBDALINE_*`` variables that name no setting, each with a close one if any.

    pydantic-settings ignores them, so a misspelt variable would change nothing
    without a word; a misspelt key in the settings file is already an error.
    """
    known = [environment_name(name).removeprefix(ENV_PREFIX) for name in setting_names()]
    problems = []
    for variable in sorted(environ):
        upper = variable.upper()
        name = upper.removeprefix(ENV_PREFIX)
        if name == upper or name in known or upper in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        problems.append(f"unknown setting {variable}: no setting has that name{hint}")
    return problems


def _flat_path(location: tuple[int | str, ...]) -> list[str]:
    """A validation error's location as the settings file names it: a grouped field by
    its flat name (``("views", "window")`` -> ``window``), a group alone as empty."""
    path = [str(part) for part in location]
    if path and path[0] in GROUPS:
        return [GROUPS[path[0]].flat_name(path[1]), *path[2:]] if len(path) > 1 else []
    return path


def describe_validation_error(error: ValidationError) -> str:
    """One line per bad setting, naming its environment variable."""
    lines = []
    for problem in error.errors():
        path = _flat_path(problem["loc"])
        if not path:  # a rule over several settings: its message names them
            lines.append(f"invalid settings: {problem['msg'].removeprefix('Value error, ')}")
            continue
        toml_name = ".".join(path)
        # a group's unknown name; a dataclass's (the topics) says it as a keyword argument
        if problem["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            # only the settings file can name a key no field has
            close = difflib.get_close_matches(toml_name, setting_names(), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            lines.append(f"unknown setting {toml_name} in {config_file()}{hint}")
            continue
        lines.append(
            f"invalid setting {toml_name} ({environment_name(toml_name)}): {problem['msg']}"
        )
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
        return read_settings()
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None
    except pydantic_settings.SettingsError as error:  # a value that is not valid JSON
        match = re.search(r'field "([^"]+)"', str(error))
        name = match.group(1) if match else "?"
        raise SettingsError(
            f"invalid setting {name} ({environment_name(name)}): not valid JSON ({error})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{config_file()} is not valid TOML: {error}") from None
