"""The one exception type users see: the CLI prints its message on one line and exits 2."""


class RippleError(Exception):
    """Bad input or an unusable resource, described in one line with the accepted values."""
