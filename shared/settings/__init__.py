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

The modules: :mod:`.groups` (the groups, their fields and flat names), :mod:`.values`
(durations and the other value types with their rules), :mod:`.flat` (reading the flat
names from the environment and the file), :mod:`.views` (the registered views, whose
sizes are settings of ``settings.views``), :mod:`.cron` and :mod:`.pem` (value checks).
"""

from shared.settings.flat import (
    CONFIG_ENV,
    ENV_PREFIX,
    FAILPOINT_ENV,
    NOT_SETTINGS,
    SettingsError,
    config_file,
    describe_validation_error,
    environment_name,
    get_settings,
    read_settings,
    setting_field,
    setting_names,
    unknown_environment,
)
from shared.settings.groups import (
    FLAT_NAMES,
    GROUPS,
    BatchSettings,
    DemoSettings,
    KafkaSettings,
    ServingSettings,
    Settings,
    SettingsGroup,
    SparkSettings,
    SpeedSettings,
    TopicNames,
    ViewSettings,
)
from shared.settings.values import (
    describe_view_settings,
    duration_label,
    parse_duration,
    parse_servers,
)

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "FAILPOINT_ENV",
    "FLAT_NAMES",
    "GROUPS",
    "NOT_SETTINGS",
    "BatchSettings",
    "DemoSettings",
    "KafkaSettings",
    "ServingSettings",
    "Settings",
    "SettingsError",
    "SettingsGroup",
    "SparkSettings",
    "SpeedSettings",
    "TopicNames",
    "ViewSettings",
    "config_file",
    "describe_validation_error",
    "describe_view_settings",
    "duration_label",
    "environment_name",
    "get_settings",
    "parse_duration",
    "parse_servers",
    "read_settings",
    "setting_field",
    "setting_names",
    "unknown_environment",
]
