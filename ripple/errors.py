"""The one exception type users see: the CLI prints its message on one line and exits 2."""


class RippleError(Exception):
    """Bad input or an unusable resource, described in one line with the accepted values."""


class Terminated(KeyboardInterrupt):
    """SIGTERM as an exception: a driver stops as on Ctrl-C (records stored, MLflow runs closed, Ray
    shut down) and the command exits 143 instead of dying mid-write."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def stop_on_sigterm() -> None:
    """Raise `Terminated` in the main thread on SIGTERM. `ray.init` installs its own handler (a bare
    sys.exit that skips clean-up), so the grid driver calls this again once Ray is up."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
