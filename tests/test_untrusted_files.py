"""What the output protocol never takes as its own work (fileio.is_untrusted), and what it never
opens as a CSV or labels file (fileio.not_regular): files with another name, pipes, links."""
import os

from pipeline.io import fileio


def test_a_hard_link_a_pipe_and_a_link_are_untrusted_a_plain_file_is_not(tmp_path):
    plain, linked, pipe, link = (str(tmp_path / n) for n in ('plain', 'linked', 'pipe', 'link'))
    for path in (plain, linked):
        with open(path, 'wb') as stream:
            stream.write(b'x')
    os.link(linked, str(tmp_path / 'elsewhere'))
    os.mkfifo(pipe)
    os.symlink(plain, link)
    assert [fileio.is_untrusted(p) for p in (plain, linked, pipe, link)] == [False, True, True, True]
    assert fileio.is_untrusted(str(tmp_path / 'absent')) is False


def test_only_a_regular_file_is_opened_as_a_csv_or_labels_file(tmp_path):
    pipe = str(tmp_path / 'pipe.csv')
    os.mkfifo(pipe)
    (tmp_path / 'rows.csv').write_text('a.jpg,x\n')
    assert fileio.not_regular(pipe).startswith('not a regular file but a named pipe (FIFO)')
    assert fileio.not_regular('/dev/zero').startswith('not a regular file but a device')
    assert fileio.not_regular(str(tmp_path / 'rows.csv')) is None
    assert fileio.not_regular(str(tmp_path / 'absent.csv')) is None   # Its reader says so.
