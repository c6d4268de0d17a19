"""`MinimindError`: the base of every error of the package, so that a command answers any of
them with one line and the error's own exit code (`fail_with`), catching one type.

Each error of the package derives from it (a spec, a corpus, a comparison, a study, the tracking
store, a checkpoint, an export); the registry's `RegistryError` keeps its own root, since
`registry/` imports nothing of `minimind`. An error that is also a `ValueError` (a bad value
the user wrote) keeps that base beside this one.
"""

from __future__ import annotations

from minimind.foundations.exit_codes import EXIT_BAD_INPUT, fail


class MinimindError(Exception):
    """An error a command ends with: `str(e)` is one line; `exit_code` is the code the command
    exits with (`EXIT_BAD_INPUT` unless the class or the instance says otherwise)."""

    exit_code: int = EXIT_BAD_INPUT


def fail_with(error: MinimindError) -> int:
    """Print `error` as the command's one-line error; returns its exit code."""
    return fail(str(error), error.exit_code)
