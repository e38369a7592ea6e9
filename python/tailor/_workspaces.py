"""Where a workspace goes in a call: the last positional argument of every
tailor function that takes one (keyword-only options follow)."""

import warnings

from tailor._errors import invalid_argument


def workspace_last(function, kind, args):
    """The positional arguments `args` (after the runtime) of `function`,
    whose last one must be a `kind` workspace. A call in the old order
    (the workspace first) is rotated into the new one, with a
    DeprecationWarning; anything else raises tailor.InvalidArgumentError
    (also a TypeError) naming `ws`."""
    if isinstance(args[-1], kind):
        return args
    if isinstance(args[0], kind):
        warnings.warn(f"tailor: {function}(runtime, ws, ...) is deprecated: "
                      f"the workspace is now the last positional argument",
                      DeprecationWarning, stacklevel=3)
        return args[1:] + args[:1]
    name = f"{kind.__module__}.{kind.__qualname__}"
    raise invalid_argument(f"{function}: ws: expected a {name}, got "
                           f"{type(args[-1]).__name__}", type_error=True)
