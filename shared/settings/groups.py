"""The settings in their groups: :class:`Settings` and one :class:`SettingsGroup` per part
of the system, each field with its type, default and description."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_settings import NoDecode

from shared.domain.topics import Topics, check_topic_name
from shared.domain.views import sizes_of
from shared.domain.views.view import Size, ViewSizes
from shared.settings.values import (
    Cron,
    Directory,
    Duration,
    OptionalSecret,
    OptionalText,
    PemCertificates,
    PemKey,
    PositiveDuration,
    absolute_directory,
    absolute_location,
    check_servers,
    divides_a_day,
    duration_label,
    if_set,
    parse_servers,
    positive,
    split_commas,
)
from shared.settings.views import REGISTERED, VIEW_NAMES

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

    bootstrap: Annotated[str, AfterValidator(check_servers)] = Field(
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
    input_retention: Annotated[Duration | None, AfterValidator(if_set(positive))] = Field(
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
        Annotated[PositiveDuration, AfterValidator(divides_a_day)]
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
        description="micro-batch interval of the continuous speed job's queries (its operator, "
        "which computes the views, and any view's own query): a row is served about this long "
        "after its event at best",
    )
    diagnostics_trigger: PositiveDuration = Field(
        timedelta(seconds=10),
        description="micro-batch interval of its diagnostics count, whose rows wait for the "
        "watermark or max_trip anyway",
    )
    max_offsets_per_trigger: int | None = Field(
        60_000,
        ge=1,
        description="most Kafka records a speed micro-batch reads (a backlog is worked off in "
        "micro-batches of at most this many; none = all available), besides the events a "
        "view looks up before the ones it matches (registrations), read whole",
    )
    retention: PositiveDuration = Field(
        timedelta(days=3), description="retention of speed.* topics (>= 3 batch periods)"
    )
    promote_watermark_gap: PositiveDuration = Field(
        timedelta(minutes=1),
        description="a new generation is promoted only when its speed watermark is at most "
        "this far behind the served generation's (`lambdaline generation promote`)",
    )
    promote_max_lag: int = Field(
        10_000,
        ge=0,
        description="a new generation is promoted only when its speed job has at most this "
        "many input records left to read",
    )


class BatchSettings(SettingsGroup):
    """The batch layer: where the master dataset and the published versions live, and
    what a run recomputes."""

    prefix: ClassVar[str] = "batch_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"master_dir"})

    master_dir: Annotated[str | None, AfterValidator(absolute_location)] = Field(
        None,
        description="master dataset (and its ingest checkpoint): a path or a Hadoop URL "
        "(hdfs://, s3a://) every Spark executor can reach; default <state_dir>/master",
    )
    store_dir: Annotated[Path | None, AfterValidator(if_set(absolute_directory))] = Field(
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

    api_keys: Annotated[list[str], NoDecode, BeforeValidator(split_commas)] = Field(
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
    generation: int = Field(
        1,
        ge=1,
        description="the generation of the views a speed job or batch run computes: its "
        "speed topics, checkpoint and batch store (`lambdaline generation`; commands take "
        "--generation)",
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
        for flat_name, group, field in flat_layout():
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
    def speed_checkpoint(self) -> Path:
        """The speed job's checkpoint folder (one subfolder per query), of its generation."""
        name = "speed" if self.generation == 1 else f"speed.g{self.generation}"
        return self.checkpoints_dir / name

    @property
    def speed_topics(self) -> TopicNames:
        """The topics, with the speed store's of this generation (``Topics.of_generation``)."""
        return self.topics.of_generation(self.generation)  # type: ignore[return-value]

    @property
    def master_location(self) -> str:
        """Where the master dataset lives, as Spark reads it (path or URL, no trailing /)."""
        if self.batch.master_dir:
            return self.batch.master_dir.rstrip("/")
        return str(self.state_dir / "master")

    @property
    def batch_store_root(self) -> Path:
        """The batch store: generation 1's versions, the run lock, and the generations
        (``shared.platform.generations``)."""
        return self.batch.store_dir if self.batch.store_dir else self.state_dir / "batch"

    @property
    def batch_store(self) -> Path:
        """This generation's batch store (its ``CURRENT`` and versions)."""
        root = self.batch_store_root
        return root if self.generation == 1 else root / "generations" / f"{self.generation:04d}"


# --- the flat names, built from Settings ---------------------------------------------------

GROUPS: Mapping[str, type[SettingsGroup]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, SettingsGroup)
}
"""The groups of :class:`Settings` by attribute name: ``kafka``, ``spark``, ``views``, ..."""


def flat_layout() -> Iterator[tuple[str, str | None, str]]:
    """(flat name, group or None, field) of every setting, in declaration order."""
    for name in Settings.model_fields:
        group = GROUPS.get(name)
        if group is None:
            yield name, None, name
            continue
        for field in group.model_fields:
            yield group.flat_name(field), name, field


FLAT_NAMES: Mapping[str, tuple[str, str]] = {
    flat_name: (group, field) for flat_name, group, field in flat_layout() if group is not None
}
"""A grouped setting's (group, field) by its flat name: ``window`` -> (``views``, ``window``)."""
