"""What a conversion the launcher waits for shows while it runs, read from the files its steps
leave in the run's temporary folder: nothing is parsed from a log line.

Once planning is done the pipeline writes the plan (inputs per split) to
`plan-<lock token>.json`; every converted chunk leaves a sidecar per part file
(`parts/*.tfrecord.json`) and every joined shard one beside it (`shards/*.json`), each a
ShardResult (transforms/shard_results.py, transforms/resume.py). A thread polls them and shows
inputs done of the total, the rate and the time left: in place on a terminal
(pipeline/console.py), else as a line per tenth of the work seen (at most a minute apart). The
joins start once every chunk is converted, and a shard's sidecar is written before its line is
logged: so the display looks again before any other line of ours is shown, and ends at 100%
once a shard is joined, before that shard's line.

Before that, while the inputs are listed, each partition's lister notes how many inputs it has
listed so far in a small file (`listing/*.count`, at most every few tenths of a second and at its
end: transforms/listing.py). On a terminal the status names what is listed as soon as the job starts,
then shows their sum and rate (`listing folder /data: 412,000 inputs, 31,000/s`); in a log, that
is a line every LISTING_LINE_SECONDS while the listing lasts (a short one adds none).

A resumed run reuses only the chunks an earlier attempt finished under the fingerprints they
have now (transforms/resume.py): before it converts any, it notes how many that is
(`reuse-<lock token>.json`), and only those inputs are shown as reused, not counted as done;
when it reuses fewer chunks than the earlier attempt finished, a line says so.
"""
import logging
import threading
import time

from pipeline import console, label_changes
from pipeline.errors import DatasetError
from pipeline.io import fileio
from pipeline.base.settings import ConversionSettings
from pipeline.output import bounded_reads, layout
from transforms import resume

LOG = logging.getLogger(console.OURS)
LINE_EVERY_SECONDS = 60
LISTING_LINE_SECONDS = 10    # Without a terminal, a listing line this often.
_OWN = {'progress': True}   # Marks the display's own records.


class Progress:
    """Shows the progress of a conversion while it runs: `with Progress(settings): run()`.
    `settings`: the run's, or (temp_dir, lock_token) of a job a service runs that this command
    follows without having started it."""

    def __init__(self, settings: 'ConversionSettings | tuple[str, str]'):
        temp_dir, token = ((settings.temp_dir, settings.lock_token)
                           if isinstance(settings, ConversionSettings) else settings)
        self._plan = layout.plan_note(temp_dir, token)
        self._reuse = resume.reuse_note(temp_dir, token)
        self._parts = fileio.join(temp_dir, layout.PARTS)
        self._listing = fileio.join(temp_dir, layout.LISTING)
        self._source = getattr(settings, 'source', None)
        self._shards = fileio.join(temp_dir, layout.SHARDS)
        self._poll = 2.0 if fileio.is_gcs(temp_dir) else 0.2
        self._resuming = getattr(settings, 'resuming', False)
        # A local run's notes are its launcher's; a job a service runs goes on without it.
        self._own_notes = not getattr(settings, 'release_lock', True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name='progress', daemon=True)
        self._lock = threading.RLock()   # One reader of the folder at a time.
        self._seen: set[str] = set()     # Part sidecars read.
        self._done = 0                   # Inputs of the parts converted by this attempt.
        self._earlier: set[str] = set()  # Shard sidecars an earlier attempt left.
        self._plan_data: dict | None = None
        # The class names of the dataset this run replaces, to say what its ids change.
        self._replaced = (label_changes.held_labels(settings.output_dir)
                          if getattr(settings, 'overwrite', False) else None)
        self._converting = True
        self._all_done_at = None   # When the polls saw every input done (for the last rate).
        self._before_lines = _BeforeLines(self)

    def __enter__(self) -> 'Progress':
        self._reused = 0   # Inputs of the chunks reused, once the run notes them.
        self._listing_since, self._listing_line = time.time(), time.monotonic()
        try:
            if self._resuming:   # What an earlier attempt left: not this attempt's work.
                self._new_parts()
                self._earlier = set(self._shard_sidecars())
                counted = fileio.file_names(self._listing)   # This attempt lists again.
                if counted:
                    fileio.delete(counted)
            with console.output_lock():
                console.show_status(self._listing_text())
        except Exception:   # Progress is never worth failing a run for.
            logging.getLogger(console.TRACE).info('progress', exc_info=True)
        LOG.addFilter(self._before_lines)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        LOG.removeFilter(self._before_lines)
        with self._lock:
            if exc[0] is None and self._converting and self._plan_data is not None:
                self._end_converting()   # Every shard an earlier attempt's: none was joined now.
            self._converting = False
        with console.output_lock():
            console.show_status('')
        if exc[0] is None or not self._own_notes:   # Committed: the temporary folder is gone.
            return
        try:   # The notes are for this attempt's launcher only.
            notes = [path for path in (self._plan, self._reuse) if fileio.exists(path)]
            if notes:
                fileio.delete(notes)
        except Exception:
            logging.getLogger(console.TRACE).info('progress', exc_info=True)

    def _watch(self) -> None:
        last_line, next_step, shown = time.monotonic(), 1, None
        while not self._stop.wait(self._poll):
            text = self._catch_up()
            if text is None or text == shown:
                continue
            with console.output_lock():
                if self._stop.is_set():
                    return
                if console.show_status(text):
                    shown = text
                    continue
                if self._plan_data is None:   # Listing: a line every LISTING_LINE_SECONDS.
                    if time.monotonic() - self._listing_line > LISTING_LINE_SECONDS:
                        LOG.info('%s', text, extra=_OWN)
                        self._listing_line = time.monotonic()
                    continue
                todo = self._todo()
                step = int(10 * self._done / max(1, todo))
                if 0 < self._done < todo and (step >= next_step
                                              or time.monotonic() - last_line > LINE_EVERY_SECONDS):
                    LOG.info('%s', text, extra=_OWN)
                    last_line, next_step = time.monotonic(), step + 1

    def _catch_up(self) -> str | None:
        """Reads what is new in the temporary folder; ends the display once a shard is joined;
        returns the status while converting (None when there is none to show)."""
        with self._lock:
            if not self._converting:
                return None
            try:
                if not self._read_plan():
                    return self._listing_text()
                self._done += sum(self._new_parts())
                if self._done < self._todo():   # The joins start once every chunk is done.
                    return self._status()
                self._all_done_at = self._all_done_at or time.time()
                joined = set(self._shard_sidecars()) - self._earlier
            except Exception:   # Progress is never worth failing a run for.
                logging.getLogger(console.TRACE).info('progress', exc_info=True)
                return None
            if joined:
                self._end_converting()
                return None
            return self._status()

    def _end_converting(self) -> None:
        """The conversion stage ended: its last line says every input is done."""
        self._converting = False
        with console.output_lock():
            console.show_status('')
            todo = self._todo()
            if todo > 0:
                end = self._all_done_at or time.time()
                LOG.info('%s', status_text(todo, todo, self._reused, end - self._started),
                         extra=_OWN)

    def _status(self) -> str:
        todo = self._todo()
        return status_text(min(self._done, todo), todo, self._reused,
                           (self._all_done_at or time.time()) - self._started)

    def _todo(self) -> int:
        return sum(s['inputs'] for s in self._plan_data['splits'].values()) - self._reused

    def _read_plan(self) -> bool:
        """Whether the plan (the totals and the conversion's start) is known, reading it once,
        and on a resumed run what it reuses (noted before any chunk is converted)."""
        if self._plan_data is None:
            noted = fileio.modified(self._plan)
            if noted is None or self._resuming and not fileio.exists(self._reuse):
                return False
            if self._resuming:
                self._read_reuse()
            self._plan_data = _note(self._plan)
            self._started = noted   # Conversion starts.
            self._say_label_changes()
        return True

    def _say_label_changes(self) -> None:
        """The line on the label ids this run changes against the dataset it replaces."""
        names = self._plan_data.get('label_names') if isinstance(self._plan_data, dict) else None
        changed = label_changes.changes_line(
            self._replaced, names if isinstance(names, list) and all(
                isinstance(name, str) for name in names) else None)
        if changed:
            with console.output_lock():
                console.show_status('')
                LOG.info('%s', changed, extra=_OWN)

    def _listed(self) -> int:
        """The inputs the listers noted so far."""
        total = 0
        for path in fileio.file_names(self._listing):
            data = bounded_reads.read_file(path, bounded=True) if path.endswith('.count') else None
            total += int(data) if data and data.isdigit() else 0
        return total

    def _listing_text(self) -> str:
        """'listing folder /data: 412,000 inputs, 31,000/s' while the inputs are listed."""
        text = f'listing {self._source or "the input"}'
        listed = self._listed()
        seconds = time.time() - self._listing_since
        if listed and seconds > 0:
            text += f': {listed:,} inputs, {listed / seconds:,.0f}/s'
        return text

    def _read_reuse(self) -> None:
        """Takes the inputs of the chunks this run reuses as reused; says so when it reuses
        fewer chunks than an earlier attempt finished."""
        reuse = _note(self._reuse)
        self._reused = int(reuse['inputs'])
        chunks, earlier = int(reuse['chunks']), int(reuse['earlier_chunks'])
        if chunks < earlier:
            with console.output_lock():
                console.show_status('')
                LOG.info('%s', reuse_text(chunks, earlier), extra=_OWN)

    def _shard_sidecars(self) -> list[str]:
        return [p for p in fileio.file_names(self._shards) if p.endswith('.json')]

    def _new_parts(self) -> list[int]:
        """The inputs each part sidecar not read before accounts for. Listed by name: a poll
        looks at no file it has seen."""
        found = []
        for path in fileio.file_names(self._parts):
            if path.endswith('.tfrecord.json') and path not in self._seen:
                self._seen.add(path)
                try:
                    data = bounded_reads.read_file(path, bounded=True)
                    if data is None:   # The run ended and its temporary folder went.
                        continue
                    result = bounded_reads.parse_json(path, data)
                    found.append(int(result['records']) + int(result['errors']))
                except (DatasetError, ValueError, TypeError, KeyError):
                    continue   # Not a sidecar of this run: the run itself says so.
        return found


class _BeforeLines(logging.Filter):
    """Before any other record of ours is shown, the display looks at the folder again."""

    def __init__(self, progress: Progress):
        super().__init__()
        self._progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, 'progress', False):
            self._progress._catch_up()
        return True


def reuse_text(chunks: int, earlier: int) -> str:
    """'reusing 1 of the 3 chunks an earlier attempt finished: ...', for fewer than all."""
    redone = earlier - chunks
    count = f'none of the {earlier:,}' if chunks == 0 else f'{chunks:,} of the {earlier:,}'
    whose = (('its' if earlier == 1 else 'their') + ' inputs' if chunks == 0
             else 'the inputs of the other' + ('s' if redone > 1 else ''))
    return (f'reusing {count} chunk{"s" if earlier > 1 else ""} an earlier attempt finished: '
            f'{whose} changed since (or --max_input_mb did), so '
            f'{"it is" if redone == 1 else "they are"} converted again')


def status_text(done: int, todo: int, reused: int, seconds: float) -> str:
    """'converting: 1,200 of 8,000 inputs (15%), 310 inputs/s, about 22 s left'."""
    rate = done / seconds if seconds > 0 else 0.0
    text = f'converting: {done:,} of {todo:,} inputs ({100 * done / max(1, todo):.0f}%)'
    if reused:
        text += f' ({reused:,} reused from an earlier attempt)'
    if rate:
        text += f', {rate:,.0f} inputs/s'
        if done < todo:
            text += f', about {_duration((todo - done) / rate)} left'
    return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f'{seconds:.0f} s'
    if seconds < 90 * 60:
        return f'{seconds / 60:.0f} min'
    return f'{seconds / 3600:.1f} h'


def _note(path: str):
    """A note of the run's temporary folder, read and parsed within the bounds of every file
    of the protocol (a folder others may write: a note is read, never trusted)."""
    return bounded_reads.parse_json(path, bounded_reads.read_file(path, bounded=True) or b'')
