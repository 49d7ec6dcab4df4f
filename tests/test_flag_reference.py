"""docs/flags.md is what pipeline.tools.flag_reference renders from the flags, and names every flag
of `python -m pipeline.run --help`."""
import os
import re

from pipeline.tools import flag_reference
from tests.helpers import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_flag_reference_is_current():
    with open(os.path.join(REPO, 'docs', 'flags.md')) as stream:
        assert stream.read() == flag_reference.render(), (
            f'docs/flags.md is out of date; regenerate it: {flag_reference.COMMAND}')


def test_flag_reference_names_every_flag_of_help():
    help_text = cli('--help').stdout
    flags = set(re.findall(r'^  (--\w+)', help_text, re.M))
    listed = re.findall(r'^\| `(--\w+)` \|', flag_reference.render(), re.M)
    assert len(flags) > 20 and sorted(listed) == sorted(flags)
