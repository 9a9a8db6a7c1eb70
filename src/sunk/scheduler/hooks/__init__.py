"""The placeholder job's script and (later) the hooks API it calls."""

from importlib import resources


def placeholder_script() -> str:
    return resources.files(__name__).joinpath("placeholder.sh").read_text()
