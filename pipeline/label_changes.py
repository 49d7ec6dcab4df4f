"""What a run changes of the label ids of the dataset it replaces, said in one line.

A dataset's ids are a function of its input and options alone (transforms/labels.py), so a class
removed or added shifts the ids of the classes after it. With --overwrite the replaced
dataset's labels.txt is read before the run and compared with the run's class names twice: when
the plan note gives them, before any image is converted (pipeline/progress.py), and with the new
labels.txt after the commit (pipeline/command.py). A model trained on the old ids would read
the new records wrong, so the change is never silent.
"""
from pipeline.errors import printable
from pipeline.io import fileio
from pipeline.output import bounded_reads, metadata

SHOWN = 10   # Changes named in the line; the rest are counted.


def held_labels(output_dir: str) -> list[str] | None:
    """The class names of the dataset in `output_dir` in id order (its labels.txt), or None:
    no dataset there, or a labels.txt this tool did not write (not UTF-8 lines, over the
    metadata bound)."""
    try:
        data = bounded_reads.read_file(fileio.join(output_dir, metadata.LABELS), bounded=True)
        text = data.decode('utf-8') if data is not None else ''
    except Exception:   # The run's own checks of the folder say what is wrong with it.
        return None
    return text.split('\n')[:-1] if text.endswith('\n') else None


def changes_line(old: list[str] | None, new: list[str] | None) -> str | None:
    """One line naming the classes gone, moved and new from ids `old` to ids `new`; None if
    nothing moved (or either is unknown)."""
    if old is None or new is None or old == new:
        return None
    old_ids, new_ids = _first_ids(old), _first_ids(new)
    changes = []
    for name, was in old_ids.items():
        now = new_ids.get(name)
        if now is None:
            changes.append(f'{printable(name)} ({was}) gone')
        elif now != was:
            changes.append(f'{printable(name)} {was} -> {now}')
    changes += [f'{printable(name)} ({now}) new' for name, now in new_ids.items()
                if name not in old_ids]
    if not changes:
        return None
    more = f'; and {len(changes) - SHOWN} more' if len(changes) > SHOWN else ''
    return ('labels changed against the dataset replaced: ' + '; '.join(changes[:SHOWN]) + more
            + '; to keep a dataset\'s ids, give its class names in id order with --labels_file')


def _first_ids(names: list[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for label_id, name in enumerate(names):
        ids.setdefault(name, label_id)
    return ids
