"""The validation machinery of every config: strict types, one ConfigError per mistake, YAML loading.

Every config is a pydantic v2 dataclass (`config_dataclass`) with one documented line per field (CleanRL's
`Args` style): strict scalar types (an int field refuses 2.5, "3" and True; a float field takes ints and
refuses strings and bools; a bool field refuses "no"), finite floats only, no unknown keys, nested configs
built from mappings. Choices are `Literal[...]` and bounds `Annotated[..., Field(ge=...)]` (or the aliases
below); `__post_init__` keeps only the checks that span several fields. The same validation runs whether a
config comes from YAML (`load_config`, which also refuses an empty file and duplicate keys), from Python
(`GrpoConfig(steps=2.5)`, `dataclasses.replace`) or from a notebook's papermill parameters (`override`).
Every error is a ConfigError naming the class and field, the value and what is allowed, so a typo fails at
load, not mid-run.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import annotated_types
import pydantic
import pydantic.dataclasses
import yaml
from pydantic import AfterValidator, Field, Strict, StrictBool, StrictInt, StrictStr


class ConfigError(ValueError):
    """A config field has an unknown name or a value outside what is allowed."""


Int = StrictInt
"""an integer (not a float, a numeric string or a bool)"""
Float = Annotated[float, Strict()]
"""a finite real number (ints are taken as floats; strings and bools are not)"""
Str = StrictStr
Bool = StrictBool
PositiveInt = Annotated[Int, Field(ge=1)]
"""an integer >= 1"""
Count = Annotated[Int, Field(ge=0)]
"""an integer >= 0"""
Positive = Annotated[Float, Field(gt=0)]
"""a number > 0"""
Fraction = Annotated[Float, Field(ge=0, le=1)]
"""a number in [0, 1]"""


def _distinct(values: list) -> list:
    if len(set(map(repr, values))) != len(values):
        raise ValueError("a list without repeated values")
    return values


Seeds = Annotated[list[Count], Field(min_length=1), AfterValidator(_distinct)]
"""a non-empty list of distinct integers >= 0 (RL seeds, zoo seeds)"""
NonEmpty = Field(min_length=1)
"""Annotated[list[...], NonEmpty]: a list with at least one item"""

PYDANTIC = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
EXPECTED = {"int_type": "an integer", "float_type": "a number", "finite_number": "a finite number",
            "string_type": "a string", "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping",
            "dataclass_type": "a mapping of its settings", "unexpected_keyword_argument": "no such key",
            "too_short": "a non-empty list"}
BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _strip(tp: Any) -> tuple[Any, list]:
    """(the type inside Annotated[...] and Optional[...], the Annotated metadata)."""
    metadata = []
    while True:
        if typing.get_origin(tp) is Annotated:
            metadata += list(tp.__metadata__)
            tp = tp.__origin__
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp, metadata
            tp = args[0]
        else:
            return tp, metadata


def _field_type(cls: type, path: tuple) -> tuple[Any, list]:
    """The annotated type at a pydantic error location below `cls` (through fields, list items, mapping values),
    stripped: (type, metadata); (None, []) when the location leads nowhere."""
    tp, metadata = cls, []
    for part in path:
        tp, _ = _strip(tp)
        origin = typing.get_origin(tp)
        if origin in (list, dict) and isinstance(part, (int, str)):
            tp = typing.get_args(tp)[-1]
        elif dataclasses.is_dataclass(tp) and isinstance(part, str):
            tp = typing.get_type_hints(tp, include_extras=True).get(part)
        else:
            return None, []
        tp, metadata = _strip(tp)
    return tp, metadata


def _class_at(cls: type, path: tuple) -> type | None:
    """The config class at a pydantic error location below `cls`."""
    tp, _ = _field_type(cls, path)
    return tp if dataclasses.is_dataclass(tp) else None


def describe_bounds(tp: Any, metadata: list) -> str:
    """'an integer >= 1', 'a number in (0, 1)', ... from a type and its annotated_types bounds."""
    word = "an integer" if tp is int else "a number"
    bounds = {}
    for item in metadata:
        for constraint in getattr(item, "metadata", [item]):   # a FieldInfo holds its constraints in .metadata
            for name in ("ge", "gt", "le", "lt"):
                if isinstance(constraint, getattr(annotated_types, name.capitalize())):
                    bounds[name] = getattr(constraint, name)
    low = ("[", bounds["ge"]) if "ge" in bounds else ("(", bounds["gt"]) if "gt" in bounds else None
    high = (bounds["le"], "]") if "le" in bounds else (bounds["lt"], ")") if "lt" in bounds else None
    if low and high:
        return f"{word} in {low[0]}{low[1]}, {high[0]}{high[1]}"
    if low:
        return f"{word} {'>=' if low[0] == '[' else '>'} {low[1]}"
    if high:
        return f"{word} {'<=' if high[1] == ']' else '<'} {high[0]}"
    return word


def _expected(item: dict, cls: type) -> str:
    kind = item["type"]
    if kind == "literal_error" or kind in BOUNDS:
        tp, metadata = _field_type(cls, item["loc"])
        if kind == "literal_error" and typing.get_origin(tp) is Literal:
            return f"one of {list(typing.get_args(tp))}"
        if kind in BOUNDS and tp is not None:
            return describe_bounds(tp, metadata)
        ctx = item.get("ctx") or {}
        return f"one of [{ctx['expected'].replace(' or ', ', ')}]" if kind == "literal_error" else item["msg"]
    if kind == "value_error":
        return str((item.get("ctx") or {}).get("error", item["msg"]))
    return EXPECTED.get(kind, item["msg"])


def config_error(err: pydantic.ValidationError, cls: type) -> ConfigError:
    """One ConfigError for pydantic's errors: `Cls.dotted.field = value is not allowed; expected ...` per error;
    an error raised by a __post_init__ check keeps its own message."""
    lines = []
    for item in err.errors(include_url=False):
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            lines.append(str(cause))
            continue
        where = ".".join([cls.__name__, *(str(part) for part in item["loc"])])
        if item["type"] == "unexpected_keyword_argument":
            owner = _class_at(cls, item["loc"][:-1])
            allowed = sorted(f.name for f in dataclasses.fields(owner)) if owner else "?"
            lines.append(f"{where.rsplit('.', 1)[0]}: unknown key(s) {[item['loc'][-1]]}; allowed keys are {allowed}")
            continue
        if item["type"] in ("missing", "missing_argument"):
            lines.append(f"{where} is missing; expected a value (the field is required: it has no default)")
            continue
        lines.append(f"{where} = {item.get('input')!r:.80} is not allowed; expected {_expected(item, cls)}")
    return ConfigError("\n".join(dict.fromkeys(lines)))


def config_dataclass(cls=None, *, frozen: bool = False):
    """A validated config class: a pydantic dataclass whose constructor raises ConfigError."""
    def wrap(cls):
        cls = pydantic.dataclasses.dataclass(cls, config=PYDANTIC, frozen=frozen)
        build = cls.__init__

        @functools.wraps(build)
        def __init__(self, *args, **kwargs):
            try:
                build(self, *args, **kwargs)
            except pydantic.ValidationError as err:
                raise config_error(err, type(self)) from None

        cls.__init__ = __init__
        return cls
    return wrap if cls is None else wrap(cls)


def require(ok: bool, cls: str, name: str, value: Any, allowed: str) -> None:
    """A check spanning several fields: ConfigError `cls.name = value is not allowed; expected allowed` unless ok."""
    if not ok:
        raise ConfigError(f"{cls}.{name} = {value!r} is not allowed; expected {allowed}")


def choice(cls: str, name: str, value: Any, choices: tuple) -> None:
    require(value in choices, cls, name, value, f"one of {list(choices)}")


C = TypeVar("C")


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that appears twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys a merge (<<: *anchor) brings in may be overridden, as in PyYAML
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                                  f"{seen[key] + 1}){_where(node)}")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _where(node) -> str:
    name = node.start_mark.name
    return "" if name.startswith("<") else f" of {name}"


def load_config(source: str | Path | dict, cls: type[C]) -> C:
    """Load a `cls` config from a YAML file, a YAML string or a dict; an empty file, duplicate or unknown keys and
    bad values raise ConfigError (mrl.core.run_config.load_config loads a RunConfig)."""
    if isinstance(source, dict):
        values = source
    else:
        is_file = Path(str(source)).suffix in (".yaml", ".yml")
        text = Path(source).read_text() if is_file else str(source)
        try:
            values = yaml.load(text, Loader=StrictLoader)
        except yaml.YAMLError as err:
            raise ConfigError(f"{source if is_file else 'the YAML text'} is not valid YAML: {err}") from None
        if values is None:
            raise ConfigError(f"{source if is_file else 'the YAML text'} is empty; a config needs at least one "
                              f"setting (an empty mapping {{}} takes every default)")
    if not isinstance(values, dict):
        raise ConfigError(f"{cls.__name__} must be a mapping of settings, got {type(values).__name__}")
    return cls(**values)


def override(config: C, **values) -> C:
    """`dataclasses.replace(config, **values)` for a notebook's parameters: a value given as text for a list or
    mapping field (papermill's `-p probes '["sgt"]'`) is parsed as YAML first; None values are left out."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    hints = typing.get_type_hints(type(config), include_extras=True)
    changes = {}
    for name, value in values.items():
        if value is None:
            continue
        if name not in fields:
            raise ConfigError(f"{type(config).__name__} has no setting {name!r}; allowed: {sorted(fields)}")
        kind, _ = _strip(hints[name])
        if isinstance(value, str) and typing.get_origin(kind) in (list, dict):
            try:
                value = yaml.load(value, Loader=StrictLoader)
            except yaml.YAMLError as err:
                raise ConfigError(f"{type(config).__name__}.{name} = {value!r} is not valid YAML: {err}") from None
        changes[name] = value
    return dataclasses.replace(config, **changes)


def to_dict(config: Any) -> dict:
    """A plain, JSON-serialisable dict of a config (nested dataclasses included); dicts pass through."""
    return config if isinstance(config, dict) else dataclasses.asdict(config)


def config_hash(config: Any) -> str:
    """Short stable hash of a config; the zoo and run cache key."""
    blob = json.dumps(to_dict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
