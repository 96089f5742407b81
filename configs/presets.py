"""Presets in a config argument: `configs/translation.py:attention=linear,split=length`."""


def parse(arg: str | None) -> dict[str, str]:
    """'a=1,b,c=x' -> {'a': '1', 'b': '', 'c': 'x'}; a bare word is a flag preset."""
    presets = {}
    for item in filter(None, (arg or "").split(",")):
        key, _, value = item.partition("=")
        presets[key.strip()] = value.strip()
    return presets


def apply(config, arg: str | None, setters: dict) -> None:
    """Applies each preset of `arg` through `setters[key](config, value)`; an unknown key is an error."""
    for key, value in parse(arg).items():
        if key not in setters:
            raise ValueError(f"unknown config preset {key!r}; known presets: {', '.join(sorted(setters))}")
        setters[key](config, value)
