"""tailor's status codes as Python exceptions.

Every failing call raises a subclass of tailor.Error whose message is the
status text of the C++ API, e.g.
  tailor.InvalidArgumentError: INVALID_ARGUMENT: topk_ids[3,1]: expert id 9
  is outside [0, 4)
Each subclass also derives from the closest built-in exception (ValueError
for bad arguments, RuntimeError for state errors, NotImplementedError,
MemoryError), so generic handlers keep working.
"""

from tailor._capi import lib


class Error(Exception):
    """A tailor call failed; .code is the absl status code, .name its name."""

    def __init__(self, code, message):
        self.code = code
        self.name = lib.tailor_status_name(code).decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


class InvalidArgumentError(Error, ValueError):
    pass


class OutOfRangeError(Error, ValueError):
    pass


class NotFoundError(Error, LookupError):
    pass


class FailedPreconditionError(Error, RuntimeError):
    pass


class ResourceExhaustedError(Error, MemoryError):
    pass


class UnimplementedError(Error, NotImplementedError):
    pass


class UnavailableError(Error, RuntimeError):
    pass


class InternalError(Error, RuntimeError):
    pass


_BY_CODE = {
    3: InvalidArgumentError,
    5: NotFoundError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
}


def raise_for(code):
    """Raises the exception of a nonzero status `code` of the last call."""
    message = lib.tailor_last_error().decode(errors="replace")
    raise _BY_CODE.get(code, Error)(code, message)


def check(code):
    if code:
        raise_for(code)
