"""The registry mechanism: slots, names, aliases and typed options.

A component is a class registered under a slot and a name::

    @register("norm", "rmsnorm")
    class RMSNorm(nn.Module):
        @dataclass(frozen=True)
        class Options:
            eps: Annotated[float, Gt(0)] = 1e-5

        def __init__(self, options: Options, *, dim: int) -> None: ...

Its options sit next to it as a frozen dataclass named `Options` (no `Options` means the component
takes no options). Field annotations are validated with pydantic, so `Annotated` constraints and
`Literal` choices work, and an `Options.__post_init__` may raise `ValueError` for checks that span
several options. Structural sizes (dim, n_heads, ...) are not options: the model passes them to the
constructor as keyword arguments (`**dims`).

Optional class hooks, all taking the validated `Options` instance and the same `**dims`:
- `alias_options: ClassVar[dict[str, dict]]`: options that an alias fixes (`rope-gptj` -> style gptj).
- `check_dims(options, **dims)`: raise `ValueError` when the options do not fit the sizes.
- `param_count(options, **dims)` / `active_param_count(options, **dims)`: exact parameter counts
  without building; without them `count_params` builds the module on the meta device.

The registered class is the component's declaration: the registry validates, checks and counts
through it alone. It is also the component, unless `register(..., implementation="module:Class")`
names the class that is: then that module is imported only when the component is first built or
asked for (`component_class`). The built-ins are declared so (`registry/declarations/`, no torch),
and their implementations subclass their declarations: a spec validates without importing torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

if TYPE_CHECKING:
    import torch

MODEL_SLOTS: tuple[str, ...] = ("norm", "position", "attention", "mlp", "block")
"""The slots of the `model:` section; their components are `torch.nn` modules."""
SLOTS: tuple[str, ...] = (*MODEL_SLOTS, "optimizer")
"""Every slot: the model's, and `optimizer` (`torch.optim.Optimizer`s built from a model)."""

ComponentSpec = str | Mapping[str, Any]
"""A bare name (`"rmsnorm"`) or a mapping with `name` plus options (`{"name": "rmsnorm", "eps": 1e-6}`)."""

C = TypeVar("C", bound=type)


class RegistryError(ValueError):
    """The one error type of the registry: unknown slot, name or option, or an ill-typed option.
    `option` names the option an error is about (unknown, fixed by an alias, or ill-typed), so
    that a caller can point at the field without reading the message."""

    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One option of a component, as `describe` reports it."""

    name: str
    type: str
    default: Any


@dataclasses.dataclass(frozen=True)
class _Entry:
    declaration: type  # the registered class: options and hooks
    implementation: type | str  # the class built, or "module:Class" until it is imported
    canonical: str
    fixed: Mapping[str, Any]  # options fixed by an alias; empty for the canonical name

    def component(self) -> type:
        if isinstance(self.implementation, type):
            return self.implementation
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(module), name)


_names: dict[str, dict[str, _Entry]] = {slot: {} for slot in SLOTS}  # name or alias -> entry
_adapters: dict[tuple[type, str], TypeAdapter] = {}
_FINITE = ConfigDict(allow_inf_nan=False)


def _check_slot(slot: str) -> None:
    if slot not in _names:
        raise RegistryError(f"unknown slot {slot!r}; slots: {', '.join(SLOTS)}")


SUGGESTION_CUTOFF = 0.6
"""The difflib similarity a candidate needs to be suggested: typos pass, unrelated names do not."""


def did_you_mean(word: object, candidates: Iterable[str]) -> str:
    """`; did you mean 'x'?` to end an error message about the unknown `word`, or "".

    `x` is the candidate most similar to `word` if difflib rates it at least `SUGGESTION_CUTOFF`
    (a typo: `rmsnrom` -> `rmsnorm`), else the only candidate that begins with `word` (a
    shortened name: `gpt2` -> `gpt2-small`). Nothing is suggested for a word like no candidate.
    """
    word, names = str(word), [str(c) for c in candidates]
    best = difflib.get_close_matches(word, names, n=1, cutoff=SUGGESTION_CUTOFF)
    if not best and word:
        best = [name for name in names if name.startswith(word)]
    return f"; did you mean {best[0]!r}?" if len(best) == 1 else ""


def register(
    slot: str, name: str, *aliases: str, implementation: str | None = None
) -> Callable[[C], C]:
    """Class decorator: register `cls` in `slot` under `name` and `aliases`.

    `cls` declares the component (its `Options` and hooks) and is built, unless `implementation`
    ("module:Class") names the class to build, imported when first needed. Registering a name that
    another class already holds is an error; re-registering the same class (same module and
    qualified name, as when a plugin module is reloaded) replaces it.
    """
    _check_slot(slot)

    def decorate(cls: C) -> C:
        alias_options = getattr(cls, "alias_options", {})
        for key in (name, *aliases):
            held = _names[slot].get(key)
            if held is not None and _qualname(held.declaration) != _qualname(cls):
                raise RegistryError(
                    f"{slot} {key!r} is already registered by {_qualname(held.declaration)}"
                )
        built = cls if implementation is None else implementation
        _names[slot][name] = _Entry(cls, built, name, {})
        for alias in aliases:
            _names[slot][alias] = _Entry(cls, built, name, dict(alias_options.get(alias, {})))
        return cls

    return decorate


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def choices(slot: str) -> list[str]:
    """Canonical names registered in `slot`, sorted (aliases excluded; see `aliases`)."""
    _check_slot(slot)
    return sorted({entry.canonical for entry in _names[slot].values()})


def aliases(slot: str, name: str) -> dict[str, dict[str, Any]]:
    """The aliases of canonical `name` in `slot`, each with the options it fixes."""
    canonical = _lookup(slot, name).canonical
    return {
        key: dict(entry.fixed)
        for key, entry in sorted(_names[slot].items())
        if entry.canonical == canonical and key != canonical
    }


def _lookup(slot: str, name: str) -> _Entry:
    _check_slot(slot)
    entry = _names[slot].get(name)
    if entry is None:
        names = sorted(_names[slot])
        raise RegistryError(
            f"unknown {slot} {name!r}; choices: {', '.join(names)}{did_you_mean(name, names)}"
        )
    return entry


def component_class(slot: str, name: str) -> type:
    """The class that builds component `name` (or an alias) of `slot`; imports its module."""
    return _lookup(slot, name).component()


def declaration(slot: str, name: str) -> type:
    """The class that declares component `name` (or an alias) of `slot`: its `Options`, hooks
    and class attributes, without importing its implementation."""
    return _lookup(slot, name).declaration


def _option_fields(cls: type) -> list[dataclasses.Field]:
    options = getattr(cls, "Options", None)
    return list(dataclasses.fields(options)) if options is not None else []


def _option_types(cls: type) -> dict[str, Any]:
    options = getattr(cls, "Options", None)
    return typing.get_type_hints(options, include_extras=True) if options is not None else {}


def _adapter(cls: type, option: str) -> TypeAdapter:
    key = (cls, option)
    if key not in _adapters:
        # options are numbers a spec writes: `.inf` and `.nan` are never meant
        _adapters[key] = TypeAdapter(_option_types(cls)[option], config=_FINITE)
    return _adapters[key]


def _split(slot: str, spec: ComponentSpec) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        if not isinstance(spec.get("name"), str):
            raise RegistryError(f"a {slot} given as a mapping needs a string 'name', got {spec!r}")
        return spec["name"], {k: v for k, v in spec.items() if k != "name"}
    raise RegistryError(
        f"a {slot} must be a name or a mapping with 'name', got {type(spec).__name__}"
    )


def _validated_options(slot: str, spec: ComponentSpec) -> tuple[_Entry, Any]:
    name, given = _split(slot, spec)
    entry = _lookup(slot, name)
    fields = [f.name for f in _option_fields(entry.declaration)]
    valid = ", ".join(fields) if fields else "(none)"
    label = f"{slot} {entry.canonical!r}"
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key not in fields:
            raise RegistryError(
                f"unknown option {key!r} for {label}; valid options: {valid}{did_you_mean(key, fields)}",
                option=key,
            )
        if key in entry.fixed and value != entry.fixed[key]:
            raise RegistryError(
                f"option {key!r} of {label} is fixed to {entry.fixed[key]!r} by alias {name!r}",
                option=key,
            )
        try:
            values[key] = _adapter(entry.declaration, key).validate_python(value)
        except ValidationError as err:
            reason = "; ".join(e["msg"] for e in err.errors())
            raise RegistryError(
                f"option {key!r} of {label} must be "
                f"{_type_name(_option_types(entry.declaration)[key])}, "
                f"got {value!r} ({reason}); valid options: {valid}",
                option=key,
            ) from None
    for key, value in entry.fixed.items():
        values.setdefault(key, value)
    options = getattr(entry.declaration, "Options", None)
    if options is None:
        return entry, None
    try:
        return entry, options(**values)
    except ValueError as err:
        raise RegistryError(f"{label}: {err}") from None


def resolve(slot: str, spec: ComponentSpec) -> tuple[str, dict[str, Any]]:
    """Canonical name and validated options (defaults filled in) of `spec`; builds nothing."""
    entry, options = _validated_options(slot, spec)
    return entry.canonical, dataclasses.asdict(options) if options is not None else {}


def _with_options(options: Any) -> tuple[Any, ...]:
    # components without an `Options` class are constructed from their sizes alone
    return () if options is None else (options,)


def build(slot: str, spec: ComponentSpec, **dims: Any) -> torch.nn.Module:
    """Build the component `spec` of `slot`; `dims` are the structural sizes its constructor takes.

    Raises `RegistryError` first when the options do not fit the sizes (`check_dims`)."""
    entry, options = _validated_options(slot, spec)
    _check_dims(slot, entry, options, dims)
    return entry.component()(*_with_options(options), **dims)


def check_dims(slot: str, spec: ComponentSpec, **dims: Any) -> None:
    """Raise `RegistryError` when `spec`'s options do not fit the structural sizes `dims`."""
    entry, options = _validated_options(slot, spec)
    _check_dims(slot, entry, options, dims)


def _check_dims(slot: str, entry: _Entry, options: Any, dims: dict[str, Any]) -> None:
    hook = getattr(entry.declaration, "check_dims", None)
    if hook is None:
        return
    try:
        hook(*_with_options(options), **dims)
    except ValueError as err:
        raise RegistryError(f"{slot} {entry.canonical!r}: {err}") from None


INTERFACES: dict[str, tuple[str, ...]] = {
    "norm": ("forward",),
    "position": ("embed", "rotation"),
    "attention": ("forward",),
    "mlp": ("forward", "aux_loss", "expert_load"),
    "block": ("forward", "final_norm", "n_norms"),
}
"""The attributes the model reads of each model slot's component, on its class: `aux_loss` (a
0-dim tensor, or None for no auxiliary loss) and `expert_load` ([n_experts] or None) after
forward, `final_norm` (whether the model adds a norm after the last block) and `n_norms` (the
norms a block builds, for parameter counts)."""

BASES: dict[str, str] = {
    "position": "registry.position.PositionModule",
    "mlp": "registry.mlp.MLP",
    "block": "registry.block.Block",
}
"""The class a plugin of each slot may subclass to inherit the attributes it need not change."""


def check_interface(slot: str, spec: ComponentSpec, *dims: str) -> None:
    """Raise `RegistryError` when a plugin's component of model slot `slot` lacks an attribute the
    model reads (`INTERFACES`) or cannot be called as the model calls it: `cls(options, **dims)`
    (`cls(**dims)` without `Options`), `dims` the names of the keyword arguments.

    Built-in components (declared in `registry`) are left to their tests: checking them would
    import torch. A plugin's class is imported by now, as is its implementation when first asked.
    """
    entry, options = _validated_options(slot, spec)
    if entry.declaration.__module__.split(".")[0] == "registry":
        return
    cls = entry.component()
    label = f"plugin {slot} {entry.canonical!r} ({_qualname(cls)})"
    base = f"; subclass {BASES[slot]}, which provides it" if slot in BASES else ""
    for attribute in INTERFACES.get(slot, ()):
        if not hasattr(cls, attribute):
            raise RegistryError(f"{label} lacks {attribute!r}, which the model reads{base}")
    called = ", ".join(["options"] * (options is not None) + [f"{name}=..." for name in dims])
    try:
        inspect.signature(cls).bind(*_with_options(options), **dict.fromkeys(dims))
    except TypeError as err:
        raise RegistryError(
            f"{label} cannot be built as the model builds it, {cls.__name__}({called}): {err}"
        ) from None


def count_params(slot: str, spec: ComponentSpec, *, active: bool = False, **dims: Any) -> int:
    """Parameters of the component `spec` built with `dims`, without allocating weights.

    `active=True` counts only the parameters one token uses (differs from the total for MoE).
    Components without a `param_count` hook are built on the meta device and counted.
    """
    entry, options = _validated_options(slot, spec)
    hook = getattr(entry.declaration, "active_param_count" if active else "param_count", None)
    if hook is None and active:
        hook = getattr(entry.declaration, "param_count", None)
    if hook is not None:
        return int(hook(*_with_options(options), **dims))
    import torch  # only a component without a count needs torch here

    with torch.device("meta"):
        module = entry.component()(*_with_options(options), **dims)
    return sum(p.numel() for p in module.parameters())


def describe(slot: str, name: str) -> list[OptionInfo]:
    """The options of component `name` in `slot`, each with its type and default."""
    entry = _lookup(slot, name)
    types = _option_types(entry.declaration)
    infos = []
    for field in _option_fields(entry.declaration):
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        infos.append(OptionInfo(field.name, _type_name(types[field.name]), default))
    return infos


def _type_name(annotation: Any) -> str:
    """A short readable type: `float > 0`, `neox|gptj`, `int | None`."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *metadata = typing.get_args(annotation)
        bounds = [_bound_text(m) for m in metadata]
        return " ".join([_type_name(base), *[b for b in bounds if b]])
    if origin is Literal:
        return "|".join(str(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _bound_text(metadata: Any) -> str:
    symbols = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    return ", ".join(
        f"{symbol} {getattr(metadata, attr)}"
        for attr, symbol in symbols.items()
        if getattr(metadata, attr, None) is not None
    )


def load_plugins(modules: list[str]) -> None:
    """Import user modules whose import registers components (`plugins: [mypkg.norms]` in a spec)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise RegistryError(f"cannot import plugin module {module!r}: {err}") from err
