"""What the config checks share: the error they raise and the checks of single fields, used by
training/validate.py and by each task's own check_config (tasks/interface.py)."""
import difflib
import os


class ConfigError(ValueError):
    pass


def did_you_mean(name: str, known, key=None) -> str:
    """"; did you mean x, y?" naming the known names closest to a misspelled one, or "" if none is close.
    `key`: the part of each name compared (a path's file name), where the rest is shared."""
    if not isinstance(name, str):
        return ""
    key = key or (lambda whole: whole)
    by_key = {key(known_name): known_name for known_name in known}
    close = difflib.get_close_matches(key(name), list(by_key), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(by_key[match] for match in close)}?" if close else ""


def choice(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"config.{field}={value!r} is not allowed; choose one of: {', '.join(allowed)}"
                          f"{did_you_mean(value, allowed)}")


def _get(config, dotted: str):
    for part in dotted.split("."):
        config = config[part]
    return config


def check_int(config, field: str, low: int) -> None:
    """config.<field> (dotted) must be an integer >= low."""
    value = _get(config, field)
    if not isinstance(value, int) or value < low:
        raise ConfigError(f"config.{field}={value!r} must be an integer >= {low}")


def check_number(config, field: str, interval: str, why: str) -> None:
    """config.<field> (dotted) must be a number in `interval`, e.g. "[0, 1)"; `why` explains it, if not empty."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    value = _get(config, field)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (is_number and (low <= value if interval[0] == "[" else low < value)
            and (value <= high if interval[-1] == "]" else value < high)):
        raise ConfigError(f"config.{field}={value!r} must be a number in {interval}" +
                          (f"; {why}" if why else ""))


def check_file(config, field: str) -> None:
    path = config.dataset[field]
    if not path:
        raise ConfigError(f"config.dataset.{field} is empty; dataset.name={config.dataset.name!r} needs it")
    if os.path.isdir(path):
        raise ConfigError(f"config.dataset.{field}={path!r} is a directory; give the data file")
    if not os.path.isfile(path):
        raise ConfigError(f"config.dataset.{field}={path!r}: file not found")


def check_fields_read(config, fields_by_name: dict[str, tuple[str, ...]], defaults: dict | None = None) -> None:
    """fields_by_name: dataset.name -> the dataset fields only that name reads. Set for another name (given
    a value other than empty or their entry in `defaults`), they would be silently ignored."""
    defaults = defaults or {}
    for name, fields in fields_by_name.items():
        for field in fields:
            value = config.dataset[field]
            if config.dataset.name != name and value and value != defaults.get(field):
                raise ConfigError(f"config.dataset.{field}={value!r} is read only when "
                                  f"dataset.name={name!r} (it is {config.dataset.name!r}); add "
                                  f"--config.dataset.name={name}, or leave {field} out")
