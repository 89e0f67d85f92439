"""Errors that stop the server from starting (bad data dir, unreadable state): shown as one line."""


class StartupError(Exception):
    pass
