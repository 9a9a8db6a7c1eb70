"""The one exception type the dev cluster raises: its message is shown to the user as is."""


class DevClusterError(Exception):
    """A problem the user can act on, described in one sentence."""
