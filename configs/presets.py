"""Presets in a config argument: `configs/translation.py:attention=linear,split=length`.

A preset is a setter `(config, value)`; one whose value parameter is named `_` is a flag, given bare (`tiny`),
the others take a value (`attention=linear`). A preset given twice, a flag given a value, a value preset
given none, and two presets of one `exclusive` group (the run sizes: `tiny,quick`) are refused: each would
otherwise be decided silently by the order of the argument."""
import inspect

from training.config_checks import did_you_mean


def parse(arg: str | None) -> dict[str, str]:
    """'a=1,b,c=x' -> {'a': '1', 'b': '', 'c': 'x'}; a bare word is a flag preset. A key given twice is an
    error, whatever its values."""
    presets = {}
    for item in filter(None, (arg or "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() in presets:
            raise ValueError(f"config preset {key.strip()!r} is given twice in {arg!r}; give it once")
        presets[key.strip()] = value.strip()
    return presets


def _takes_value(setter) -> bool:
    return list(inspect.signature(setter).parameters)[1] != "_"


def _check(key: str, value: str, setters: dict) -> None:
    if key not in setters:
        raise ValueError(f"unknown config preset {key!r}; known presets: {', '.join(sorted(setters))}"
                         f"{did_you_mean(key, setters)}")
    if _takes_value(setters[key]) and not value:
        raise ValueError(f"config preset {key!r} takes a value: {key}=<value>")
    if not _takes_value(setters[key]) and value:
        raise ValueError(f"config preset {key!r} takes no value (it is given or not): write {key}, not "
                         f"{key}={value}")


def apply(config, arg: str | None, setters: dict, exclusive: tuple[str, ...] = ()) -> None:
    """Applies each preset of `arg` through `setters[key](config, value)`; an unknown key, a preset given
    twice or with a value it does not take, and two presets of `exclusive` are errors."""
    given = parse(arg)
    for key, value in given.items():
        _check(key, value, setters)
    if len(clash := [key for key in given if key in exclusive]) > 1:
        raise ValueError(f"config presets {' and '.join(clash)} exclude each other (each sets the run's size); "
                         f"give one of {', '.join(exclusive)}")
    for key, value in given.items():
        setters[key](config, value)
