"""Settings read by their flat names (:data:`shared.settings.groups.FLAT_NAMES`: each
setting's one name outside code, the ``lambdaline.toml`` key and, upper-cased after
``LAMBDALINE_``, the environment variable) from the environment and the settings file,
with errors that name them."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import pydantic_settings
from pydantic import ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from shared.domain.topics import Topics
from shared.settings.groups import FLAT_NAMES, GROUPS, Settings, TopicNames, flat_layout
from shared.settings.views import VIEW_MODULES_ENV

ENV_PREFIX = "LAMBDALINE_"

CONFIG_ENV = "LAMBDALINE_CONFIG"
"""Names the settings file; not a setting itself."""

FAILPOINT_ENV = "LAMBDALINE_FAILPOINT"
"""Names where a batch run stops for a test to kill it (:mod:`shared.platform.failpoints`);
not a setting."""

NOT_SETTINGS = frozenset({CONFIG_ENV, FAILPOINT_ENV, VIEW_MODULES_ENV})
"""``LAMBDALINE_*`` variables that are read elsewhere, not by :class:`Settings`."""


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
        for flat_name, _, _ in flat_layout()
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


def setting_names() -> list[str]:
    """Every setting's name as the settings file writes it: ``window``, ``topics``,
    ``topics.entries``, ``kafka_bootstrap``."""
    names = []
    for flat_name, _, _ in flat_layout():
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
