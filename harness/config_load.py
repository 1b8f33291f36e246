"""The harness configuration read from a nested mapping (a scenario's ``workload.harness``)
or from the command line (``python -m harness --help``), and written back as one: derived
from the dataclasses of ``harness.config``, so that an option is declared exactly once.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from typing import Any, Literal

from harness.config import SECTIONS, ConfigError, HarnessConfig, field_docs

__all__ = ["build_parser", "config_from_args", "config_from_mapping", "config_to_args"]


def _allowed(cls: type, name: str) -> tuple[Any, ...] | None:
    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def _coerce(cls: type, name: str, value: Any, where: str) -> Any:
    hint = typing.get_type_hints(cls)[name]
    choices = _allowed(cls, name)
    if choices is not None:
        if value not in choices:
            raise ConfigError(f"{where}: {value!r} is not allowed; allowed values: {', '.join(map(str, choices))}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits: no float holds it
            raise ConfigError(f"{where}: expected a finite number, got an integer of {len(str(abs(value)))} digits") from None
    if not isinstance(value, hint) or isinstance(value, bool) and hint is not bool:
        raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    if hint is float and not math.isfinite(value):
        # lr: .inf trains to NaN from step 1; nothing finite-only code does is meaningful then.
        raise ConfigError(f"{where}: expected a finite number, got {value}")
    return value


def config_from_mapping(data: dict[str, Any], where: str = "harness") -> HarnessConfig:
    """Build from a nested mapping (a scenario's ``workload.harness``); unknown keys are errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of harness options")
    top: dict[str, Any] = {}
    top_fields = {f.name for f in dataclasses.fields(HarnessConfig)}
    for key, value in data.items():
        if key not in top_fields:
            raise ConfigError(
                f"{where}.{key}: unknown harness option; allowed: {', '.join(sorted(top_fields))}"
            )
        if key in SECTIONS:
            section = SECTIONS[key]
            names = {f.name for f in dataclasses.fields(section)}
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: expected a mapping with keys {', '.join(sorted(names))}")
            # key=str: a YAML mapping may mix key types ({1: 2, foo: 3}), which do not sort together.
            unknown = sorted(set(value) - names, key=str)
            if unknown:
                raise ConfigError(
                    f"{where}.{key}.{unknown[0]}: unknown option; allowed: {', '.join(sorted(names))}"
                )
            kwargs = {k: _coerce(section, k, v, f"{where}.{key}.{k}") for k, v in value.items()}
            top[key] = _build(section, kwargs, f"{where}.{key}")
        else:
            top[key] = _coerce(HarnessConfig, key, value, f"{where}.{key}")
    return _build(HarnessConfig, top, where)


def _build(cls: type, kwargs: dict[str, Any], where: str) -> Any:
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _flag(section: str | None, name: str) -> str:
    return "--" + ((f"{section}-" if section else "") + name).replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description=(
            "The trainchaos harness: a small, deterministic, resilient DDP training job "
            "(launch it with torchrun). Every option below has a default."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sections: list[tuple[str | None, type]] = [(None, HarnessConfig), *SECTIONS.items()]
    for section, cls in sections:
        group = parser.add_argument_group(section or "training")
        docs = field_docs(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in SECTIONS:
                continue
            default = f.default if f.default is not dataclasses.MISSING else None
            dest = f"{section}.{f.name}" if section else f.name
            help_text = docs.get(f.name, "")
            if hints[f.name] is bool:
                # An option that is on by default needs a way to say off: --no-<flag>.
                action = argparse.BooleanOptionalAction if default else "store_true"
                group.add_argument(_flag(section, f.name), dest=dest, action=action,
                                   default=bool(default), help=help_text)
                continue
            choices = _allowed(cls, f.name)
            kind = str if choices else hints[f.name]
            group.add_argument(_flag(section, f.name), dest=dest, type=kind, default=default,
                               choices=choices, help=help_text)
    return parser


def config_from_args(argv: list[str] | None = None) -> HarnessConfig:
    """Parse the command line; invalid values exit 2 with one clear message (argparse)."""
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    nested: dict[str, Any] = {}
    for key, value in ns.items():
        section, _, name = key.rpartition(".")
        (nested.setdefault(section, {}) if section else nested)[name] = value
    try:
        return config_from_mapping(nested, where="options")
    except ConfigError as exc:
        parser.error(_in_flag_terms(str(exc)))
        raise  # unreachable: parser.error exits


def _in_flag_terms(message: str) -> str:
    """``options.checkpoint: checkpoint.keep is 1`` -> ``--checkpoint-keep is 1``: name what was typed."""
    import re

    message = re.sub(r"^options(\.\w+)*: ", "", message)
    message = re.sub(r"\b(model|checkpoint|failure|detect|progress|slow_rank)\.(\w+)", lambda m: _flag(m[1], m[2]), message)
    top = {f.name for f in dataclasses.fields(HarnessConfig)} - set(SECTIONS)
    first, _, rest = message.partition(" ")
    return f"{_flag(None, first)} {rest}" if first in top else message


def config_to_args(cfg: HarnessConfig) -> list[str]:
    """The command line that reproduces ``cfg`` exactly (every option explicit)."""
    args: list[str] = []
    sections: list[tuple[str | None, Any]] = [(None, cfg)] + [(name, getattr(cfg, name)) for name in SECTIONS]
    for section, obj in sections:
        for f in dataclasses.fields(obj):
            if f.name in SECTIONS:
                continue
            value = getattr(obj, f.name)
            if isinstance(value, bool):
                if value != f.default:
                    flag = _flag(section, f.name)
                    args.append(flag if value else "--no-" + flag[2:])
                continue
            args += [_flag(section, f.name), str(value)]
    return args
