"""A stand-in for the `expecttest` package (PyPI), which PyTorch's test helpers import and
Debian does not package. torch.testing._internal.common_utils needs only the module
attribute ACCEPT and the class TestCase (a unittest.TestCase with assertExpectedInline);
the OpInfo sweep (tests/python/opinfo_sweep.py) puts this directory on sys.path only when
`import expecttest` fails, so a real expecttest always wins."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        self.assertEqual(expect, actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):  # noqa: N802
        with self.assertRaises(exc_type) as ctx:
            callable(*args, **kwargs)
        self.assertEqual(expect, str(ctx.exception))
