"""tailor's status codes as Python exceptions.

Every failing call raises a subclass of tailor.Error whose message is the
status text of the C++ API, e.g.
  tailor.InvalidArgumentError: INVALID_ARGUMENT: topk_ids[3,1]: expert id 9
  is outside [0, 4)
Each subclass also derives from the closest built-in exception (ValueError
for bad arguments, RuntimeError for state errors, NotImplementedError,
MemoryError), so generic handlers keep working. Checks made in Python
raise the same types with the same form of message, naming the argument
("out: is read-only ..."); an argument of the wrong kind (not a tensor, an
unsupported dtype) raises an InvalidArgumentError that is also a TypeError.
"""

import re

from tailor._capi import lib

_INVALID_ARGUMENT = 3


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


class _InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong kind (not a tensor, an unsupported dtype):
    a tailor.InvalidArgumentError that `except TypeError` also catches."""


def invalid_argument(message, type_error=False):
    """The tailor.InvalidArgumentError for a check made in Python; `message`
    starts with the argument's name and states the rule, as the C++ API's."""
    cls = _InvalidArgumentTypeError if type_error else InvalidArgumentError
    return cls(_INVALID_ARGUMENT, message)


def renamed(error, names):
    """`error` (a tailor.Error) with argument names replaced by the caller's
    own ({"w13": "w1"}: a wrapper whose argument has another name)."""
    message = error.message
    for old, new in names.items():
        message = re.sub(rf"\b{re.escape(old)}\b", new, message)
    return type(error)(error.code, message)


def raise_for(code):
    """Raises the exception of a nonzero status `code` of the last call."""
    message = lib.tailor_last_error().decode(errors="replace")
    raise _BY_CODE.get(code, Error)(code, message)


def check(code):
    if code:
        raise_for(code)
