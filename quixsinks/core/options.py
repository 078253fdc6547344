"""Typed options: Spark's string options parsed once into a frozen dataclass.

Each sink declares its options as fields of a frozen dataclass derived from
:class:`SinkOptions`, with :func:`option` giving the default, a one-line doc and flags
(secret, environment variable, aliases). That declaration is the single source of
truth: parsing, the unknown-option message, the redacted repr and the options tables
in the docs are all derived from it.

Spark hands options over as strings with case-insensitive keys. An option is accepted
in snake_case (``key_column``, as in Quix Streams), camelCase (``keyColumn``, as in
Spark) or any other casing: names are compared with case, ``_`` and ``-`` ignored.

Supported field types: ``str``, ``int``, ``float``, ``bool``, ``tuple[str, ...]``
(comma-separated), ``Literal[...]`` (one of fixed choices), and ``X | None`` of those.
A ``float`` is always finite (``nan`` and ``inf`` are refused); a timeout is declared with
``positive=True`` and must be above zero. Numbers take ``minimum=``/``maximum=``, strings a
``pattern=`` (a regular expression the whole value must match), and options that exclude each
other share a ``one_of=`` group name: at most one of them may be given.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, Union

from .errors import OptionError, format_allowed
from .secrets import REDACTED, is_secret_name, mask_value, secret_parts

__all__ = [
    "REDACTED",
    "OptionSpec",
    "SinkOptions",
    "check_import_path",
    "load_callable",
    "normalize_name",
    "option",
    "shown_value",
]

# Options Spark itself adds to a data source's options; never an error.
_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})

T = TypeVar("T", bound="SinkOptions")


def normalize_name(name: str) -> str:
    """The comparison form of an option name: lower case, without ``_`` and ``-``."""
    return name.replace("_", "").replace("-", "").lower()


def option(
    default: Any = MISSING,
    *,
    doc: str,
    secret: bool = False,
    env: str | None = None,
    aliases: tuple[str, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    pattern: str | None = None,
    pattern_name: str | None = None,
    one_of: str | None = None,
) -> Any:
    """Declare an option field.

    Args:
        default: the default value; leave out for a required option.
        doc: one line for the docs and for error messages.
        secret: never shown in reprs, logs or errors (an option whose name says it is a
            credential is secret without this: see :mod:`quixsinks.core.secrets`).
        env: environment variable read (on the driver) when the option is not given.
        aliases: other accepted names (e.g. Quix's ``time_setter`` for ``time_key``).
        minimum: smallest allowed value for a number.
        maximum: largest allowed value for a number.
        positive: a number above zero (every timeout: 0 or a negative number would mean
            "wait forever" to some client libraries, so it is refused).
        pattern: a regular expression a string value must match as a whole (each item of
            a list option too).
        pattern_name: what the pattern means, in words, for the refusal (``"a Kinesis
            stream name: 1-128 letters, digits, '_', '-' and '.'"``).
        one_of: a group name shared by options that exclude each other: giving two of
            them is refused before any data moves, naming both.
    """
    if pattern is not None:
        re.compile(pattern)  # a bad declaration fails at import, not on a user's value
    metadata = {
        "doc": doc,
        "secret": secret,
        "env": env,
        "aliases": aliases,
        "minimum": minimum,
        "maximum": maximum,
        "positive": positive,
        "pattern": pattern,
        "pattern_name": pattern_name,
        "one_of": one_of,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or None as an option default")
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class OptionSpec:
    """What the docs and the error messages know about one option."""

    name: str
    type_name: str
    default: Any
    required: bool
    doc: str
    secret: bool
    env: str | None
    aliases: tuple[str, ...]
    choices: tuple[str, ...] | None
    minimum: float | None = None
    positive: bool = False
    maximum: float | None = None
    pattern: str | None = None
    one_of: str | None = None
    pattern_name: str | None = None

    @property
    def is_secret(self) -> bool:
        """Declared secret, or a name that says so (the one rule, quixsinks.core.secrets)."""
        return self.secret or is_secret_name(self.name)

    @property
    def camel_name(self) -> str:
        head, *rest = self.name.split("_")
        return head + "".join(part.capitalize() for part in rest)

    def limits(self) -> list[str]:
        """The declared limits in words, for the docs tables (``above 0``, ``1 to 65535``...)."""
        words = []
        if self.positive:
            words.append("above 0")
        if self.minimum is not None and self.maximum is not None:
            words.append(f"{_number(self.minimum)} to {_number(self.maximum)}")
        elif self.minimum is not None:
            words.append(f"at least {_number(self.minimum)}")
        elif self.maximum is not None:
            words.append(f"at most {_number(self.maximum)}")
        if self.pattern is not None:
            words.append(f"matches `{self.pattern.replace('|', chr(92) + '|')}`")
        if self.one_of is not None:
            words.append(f"excludes the other `{self.one_of}` options")
        return words

    def default_text(self) -> str:
        if self.required:
            return "required"
        if self.default is None:
            return "unset"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, tuple):
            return ",".join(self.default) if self.default else "empty"
        if self.default == "":
            return "empty"
        return str(self.default)


@dataclass(frozen=True, kw_only=True)
class SinkOptions:
    """Base of every sink's options; subclasses add fields declared with :func:`option`.

    Build one with :meth:`from_options`; the object is frozen, compares by value and
    pickles cheaply, so it can travel to executors inside a writer.
    """

    sink_name: ClassVar[str] = "sink"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # @dataclass adds a __repr__ showing every field unless the class has one: each
        # options class gets the redacted one
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = SinkOptions.__repr__  # type: ignore[method-assign]

    @classmethod
    def from_options(cls: type[T], options: Mapping[str, str]) -> T:
        """Parse Spark's string options; raise :class:`OptionError` on any problem."""
        specs = {spec.name: spec for spec in cls.specs()}
        by_normal: dict[str, str] = {}
        for spec in specs.values():
            for name in (spec.name, *spec.aliases):
                by_normal[normalize_name(name)] = spec.name

        given: dict[str, tuple[str, str]] = {}
        for raw_key, raw_value in options.items():
            normal = normalize_name(raw_key)
            if normal in _SPARK_OPTIONS:
                continue
            canonical = by_normal.get(normal)
            if canonical is None:
                raise cls._unknown(raw_key, specs)
            if canonical in given and given[canonical][0] != raw_key:
                first = given[canonical][0]
                raise OptionError(
                    f"{cls.sink_name}: option {canonical!r} is given twice (as {first!r} and "
                    f"{raw_key!r})",
                    option=canonical,
                )
            given[canonical] = (raw_key, raw_value)

        values: dict[str, Any] = {}
        for name, spec in specs.items():
            if name in given:
                values[name] = cls._parse_named(spec, given[name][1])
            elif spec.env and os.environ.get(spec.env):
                values[name] = cls._parse_named(spec, os.environ[spec.env])
            elif spec.required:
                hint = f" (or set the environment variable {spec.env})" if spec.env else ""
                raise OptionError(
                    f"{cls.sink_name}: option {name!r} is required: {spec.doc}{hint}",
                    option=name,
                )
        cls._check_exclusive(specs, given, values)
        instance = cls(**values)
        try:
            instance.validate()
        except OptionError as exc:
            raise cls._named(exc) from None
        return instance

    @classmethod
    def _parse_named(cls, spec: OptionSpec, raw: str) -> Any:
        """One option's value, parsed; a refusal names the sink first, as every option
        error does (``file: option 'format' has value 'jsonl', expected ...``)."""
        try:
            return _parse(spec, raw, cls._hints()[spec.name])
        except OptionError as exc:
            raise cls._named(exc) from None

    @classmethod
    def _named(cls, exc: OptionError) -> OptionError:
        """``exc``, its message starting with the sink's name (as every option error)."""
        if exc.message.startswith(f"{cls.sink_name}:"):
            return exc
        named = type(exc)(f"{cls.sink_name}: {exc.message}", **exc._kwargs)
        return named

    @classmethod
    def _check_exclusive(
        cls,
        specs: Mapping[str, OptionSpec],
        given: Mapping[str, tuple[str, str]],
        values: Mapping[str, Any],
    ) -> None:
        """Refuse two given options of one ``one_of`` group, naming both as the user wrote
        them. An option is given when the user set it to something other than its default
        (``table_name=none`` or ``do_nothing=false`` next to the other option is fine; an
        environment variable never counts)."""
        seen: dict[str, str] = {}
        for name in given:
            group = specs[name].one_of
            if group is None or values[name] == specs[name].default:
                continue
            if group in seen:
                first = seen[group]
                members = [s.name for s in specs.values() if s.one_of == group]
                raise OptionError(
                    f"{cls.sink_name}: options {given[first][0]!r} and {given[name][0]!r} "
                    f"exclude each other: give one of {format_allowed(members)}",
                    option=name,
                    allowed=members,
                )
            seen[group] = name

    def validate(self) -> None:
        """Check relations between options; subclasses override and raise OptionError."""

    @classmethod
    def specs(cls) -> list[OptionSpec]:
        """Every option of this class, in declaration order (built once per class: Spark
        plans a stream writer, parsing the options, twice per micro-batch)."""
        cache = cls.__dict__.get("_specs_cache")
        if cache is None:
            cache = tuple(cls._build_specs())
            type.__setattr__(cls, "_specs_cache", cache)
        return list(typing.cast(tuple[OptionSpec, ...], cache))

    @classmethod
    def _build_specs(cls) -> list[OptionSpec]:
        hints = cls._hints()
        result = []
        for f in dataclasses.fields(cls):
            if "doc" not in f.metadata:
                continue
            hint = hints[f.name]
            result.append(
                OptionSpec(
                    name=f.name,
                    type_name=_type_name(hint),
                    default=None if f.default is MISSING else f.default,
                    required=f.default is MISSING and f.default_factory is MISSING,
                    doc=f.metadata["doc"],
                    secret=f.metadata["secret"],
                    env=f.metadata["env"],
                    aliases=f.metadata["aliases"],
                    choices=_choices(hint),
                    minimum=f.metadata["minimum"],
                    positive=f.metadata.get("positive", False),
                    maximum=f.metadata.get("maximum"),
                    pattern=f.metadata.get("pattern"),
                    one_of=f.metadata.get("one_of"),
                    pattern_name=f.metadata.get("pattern_name"),
                )
            )
        return result

    def redacted(self) -> dict[str, Any]:
        """The options as a dict, every secret replaced by ``***`` (for logs): declared
        secrets, options and map entries whose name says they are credentials, and the
        password part of URLs and DSNs (the rest of them stays readable). A map option
        (such as iceberg's ``catalog.*`` properties) is shown as a dict."""
        return {spec.name: shown_value(spec, getattr(self, spec.name)) for spec in self.specs()} | {
            f.name: _shown_map(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if "doc" not in f.metadata and _is_map(getattr(self, f.name))
        }

    def secret_values(self) -> list[str]:
        """Every secret these options hold (whole secret values, passwords of URLs and
        DSNs, credential entries of map options): what a scrubber takes out of a text."""
        values: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if _is_map(value):
                for key, item in value:
                    secret = is_secret_name(key)
                    values.extend([item, *secret_parts(item)] if secret else secret_parts(item))
                continue
            secret = bool(f.metadata.get("secret")) or is_secret_name(f.name)
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if isinstance(item, str) and item:
                    values.extend([item, *secret_parts(item)] if secret else secret_parts(item))
        return list(dict.fromkeys(values))

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={value!r}"
            for name, value in self.redacted().items()
            if value not in (None, (), {})
        )
        return f"{type(self).__name__}({shown})"

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)

    @classmethod
    def _hints(cls) -> dict[str, Any]:
        """Each field's type, evaluated. Works for classes Spark pickled by value too,
        whose module may not be importable in a worker: names fall back to typing's."""
        cache = cls.__dict__.get("_hints_cache")
        if cache is None:
            cache = {f.name: _evaluate(f.type, f, cls) for f in dataclasses.fields(cls)}
            type.__setattr__(cls, "_hints_cache", cache)
        return typing.cast(dict[str, Any], cache)

    @classmethod
    def _unknown(cls, raw_key: str, specs: Mapping[str, OptionSpec]) -> OptionError:
        names = sorted(specs)
        close = difflib.get_close_matches(
            normalize_name(raw_key), [normalize_name(n) for n in names], n=1, cutoff=0.75
        )
        suggestion = ""
        if close:
            match = next(n for n in names if normalize_name(n) == close[0])
            suggestion = f" Did you mean {match!r}?"
        return OptionError(
            f"{cls.sink_name}: unknown option {raw_key!r}.{suggestion} "
            f"Valid options: {', '.join(names)}",
            option=raw_key,
            allowed=names,
        )


def _is_map(value: Any) -> bool:
    """A map option: a tuple of (key, value) string pairs (e.g. pass-through properties)."""
    return (
        isinstance(value, tuple)
        and bool(value)
        and all(isinstance(item, tuple) and len(item) == 2 for item in value)
    )


def _shown_map(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {k: REDACTED if is_secret_name(k) else mask_value(str(v)) for k, v in pairs}


def shown_value(spec: OptionSpec, value: Any) -> Any:
    """An option's value as it may be shown (secrets ``***``, URL passwords masked)."""
    if value is None:
        return None
    if spec.is_secret:
        return REDACTED
    if isinstance(value, str):
        return mask_value(value)
    if _is_map(value):
        return _shown_map(value)
    if isinstance(value, tuple):
        return tuple(mask_value(v) if isinstance(v, str) else v for v in value)
    return value


def _evaluate(annotation: Any, f: dataclasses.Field[Any], cls: type) -> Any:
    if not isinstance(annotation, str):
        return annotation
    owner = next((k for k in cls.__mro__ if f.name in inspect.get_annotations(k)), cls)
    module = sys.modules.get(owner.__module__)
    namespace = {**vars(typing), **(vars(module) if module else {})}
    try:
        return eval(annotation, namespace)
    except NameError as exc:
        raise TypeError(f"cannot resolve the type {annotation!r} of option {f.name!r}") from exc


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _choices(hint: Any) -> tuple[str, ...] | None:
    inner, _ = _unwrap_optional(hint)
    if typing.get_origin(inner) is Literal:
        return tuple(str(a) for a in typing.get_args(inner))
    return None


def _type_name(hint: Any) -> str:
    inner, _optional = _unwrap_optional(hint)
    if typing.get_origin(inner) is Literal:
        name = "|".join(str(a) for a in typing.get_args(inner))
    elif typing.get_origin(inner) is tuple:
        name = "list"
    else:
        name = getattr(inner, "__name__", str(inner))
    return name


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _parse(spec: OptionSpec, raw: str, hint: Any) -> Any:
    """Turn one option string into its typed value, or raise a precise OptionError."""
    shown = REDACTED if spec.is_secret else mask_value(str(raw))
    inner, optional = _unwrap_optional(hint)
    text = str(raw).strip()
    # "none"/"null" unset an optional option; a secret is taken as given (a password may
    # well be "None"): only an empty one is unset
    if optional and (raw == "" if spec.secret else text.lower() in ("", "none", "null")):
        return None

    def bad(expected: str, allowed: Any = None) -> OptionError:
        return OptionError(
            f"option {spec.name!r} has value {shown!r}, expected {expected}",
            option=spec.name,
            value=shown,
            allowed=allowed if allowed is not None else expected,
        )

    if typing.get_origin(inner) is Literal:
        choices = tuple(str(a) for a in typing.get_args(inner))
        for choice in choices:
            if text.lower() == choice.lower():
                return choice
        raise bad(f"one of {format_allowed(choices)}", choices)
    if inner is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise bad("true or false")
    if inner is int:
        try:
            number: int | float = int(text)
        except ValueError:
            raise bad("an integer") from None
        _check_range(spec, number, shown)
        return number
    if inner is float:
        try:
            number = float(text)
        except ValueError:
            raise bad("a number") from None
        if not math.isfinite(number):  # nan, inf: no option means either
            raise bad("a finite number")
        _check_range(spec, number, shown)
        return number
    if typing.get_origin(inner) is tuple:
        items = tuple(part.strip() for part in text.split(",") if part.strip())
        for item in items:
            _check_pattern(spec, item, bad)
        return items
    if inner is str:
        if not text and not optional and not spec.secret:
            raise bad("a non-empty string")
        _check_pattern(spec, str(raw), bad)
        return str(raw)
    raise TypeError(f"unsupported option type {hint!r} for {spec.name!r}")


def _number(value: float) -> str:
    """A limit as people write it: ``10000000``, ``0.5`` (never ``1e+07``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _check_pattern(spec: OptionSpec, value: str, bad: Callable[..., OptionError]) -> None:
    if spec.pattern is not None and re.fullmatch(spec.pattern, value) is None:
        raise bad(spec.pattern_name or f"a value matching {spec.pattern!r}", spec.pattern)


def _check_range(spec: OptionSpec, number: float, shown: str) -> None:
    if spec.positive and number <= 0:
        raise OptionError(
            f"option {spec.name!r} has value {shown!r}, expected a number above 0",
            option=spec.name,
            value=shown,
            allowed="> 0",
        )
    minimum = spec.minimum
    if minimum is not None and number < minimum:
        raise OptionError(
            f"option {spec.name!r} has value {shown!r}, expected a number >= {_number(minimum)}",
            option=spec.name,
            value=shown,
            allowed=f">= {_number(minimum)}",
        )
    maximum = spec.maximum
    if maximum is not None and number > maximum:
        raise OptionError(
            f"option {spec.name!r} has value {shown!r}, expected a number <= {_number(maximum)}",
            option=spec.name,
            value=shown,
            allowed=f"<= {_number(maximum)}",
        )


def check_import_path(path: str | None, *, option_name: str) -> None:
    """Refuse a malformed ``"package.module:function"`` path (None: the option is not
    given), without importing it: options validate this on the driver, where the module
    may be missing; :func:`load_callable` imports it where it runs.

    Raises:
        OptionError: the path is not of the form ``package.module:function``.
    """
    if path is None:
        return
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise OptionError(
            f"option {option_name!r} has value {path!r}, expected an import path "
            "'package.module:function'",
            option=option_name,
            value=path,
        )


def load_callable(path: str, *, option_name: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` and return the callable.

    Raises:
        OptionError: the path is malformed, cannot be imported, or is not callable.
    """
    import importlib

    check_import_path(path, option_name=option_name)
    module_name, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise OptionError(
            f"option {option_name!r}: {path!r} cannot be imported: {exc}",
            option=option_name,
            value=path,
        ) from exc
    if not callable(target):
        raise OptionError(
            f"option {option_name!r}: {path!r} is not callable", option=option_name, value=path
        )
    return typing.cast(Callable[..., Any], target)
