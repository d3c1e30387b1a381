"""``docs/configuration.md``, written from the settings themselves: every setting, its
environment variable, its default and its description (``make docs``; a unit test
checks that the file is current).

    python -m lambdaline.settings_doc > docs/configuration.md
"""

from __future__ import annotations

from datetime import timedelta

from shared.settings import duration_label, environment_name, setting_field, setting_names

WRITTEN_BY_HAND = {
    "state_dir": "`.lambdaline`",
    "jvm_cache_dir": "`~/.cache/lambdaline/jvm`",
    "topics": "the six below",
    "master_dir": "`<state_dir>/master`",
    "batch_store_dir": "`<state_dir>/batch`",
}
"""Defaults that depend on where a command runs (a home folder, another setting), and the
topics' table, written as a person reads them."""

DESCRIBED_BY_HAND = {"topics": "every topic name at once, as JSON"}

HEAD = """# Configuration

Settings come from `LAMBDALINE_*` environment variables, then `lambdaline.toml` (or the
file `LAMBDALINE_CONFIG` names), then the defaults below. The file's keys are the names
below without `LAMBDALINE_`, lower case (`window = "10m"`; `entries = "my.entries"` under
`[topics]`). Durations: `500ms`, `90s`, `5m`, `1h`, `3d`. A bad value or an unknown name
stops every command, naming the setting and the closest one.

`LAMBDALINE_VIEW_MODULES` is read apart from these: the modules of views to serve besides
the project's, comma-separated (docs/adding-a-view.md). A view's sizes are settings of
their own, listed here for the project's views.

This page is written from `shared/settings` by `make docs` (`python -m
lambdaline.settings_doc`); a unit test checks that it is current.

| variable | default | what |
|---|---|---|
"""


def default_as_written(name: str) -> str:
    """A setting's default as the table shows it."""
    if name in WRITTEN_BY_HAND:
        return WRITTEN_BY_HAND[name]
    default = setting_field(name).get_default(call_default_factory=True)
    if default is None or default in ([], {}):
        return "none"
    if isinstance(default, timedelta):
        return f"`{duration_label(default)}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def render() -> str:
    rows = []
    for name in setting_names():
        description = DESCRIBED_BY_HAND.get(name) or setting_field(name).description or ""
        description = description.replace("|", "\\|")
        rows.append(f"| `{environment_name(name)}` | {default_as_written(name)} | {description} |")
    return HEAD + "\n".join(rows) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
