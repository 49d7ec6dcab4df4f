"""Live progress of a conversion the launcher waits for, read from the run's temporary folder.

Once planning is done the pipeline writes the plan (inputs per split) to `plan-<lock token>.json`
in the run's temporary folder, and every converted chunk leaves a sidecar per part file
(`parts/*.tfrecord.json`, a ShardResult with its records and errors; see transforms/resume.py).
A thread in the launcher polls them and shows inputs done of the total, the rate and the time
left: in place on a terminal (pipeline/console.py), else as a log line per tenth of the work
seen (at most a minute apart). When the shards are joined every input is done: a last line
says so, at 100%, before the first shard line. Parts an earlier attempt left are reused work,
not counted as done.
"""
import json
import logging
import signal
import threading
import time

from pipeline import console
from pipeline.io import fileio
from pipeline.output import bounded_reads, output_folder
from pipeline.errors import DatasetError
from pipeline.base.settings import ConversionSettings
from transforms.write_shards import SHARD_LINE_PATTERN

LOG = logging.getLogger('image_tfrecords')
LINE_EVERY_SECONDS = 60


def plan_path(settings: ConversionSettings) -> str:
    """Where the pipeline notes its plan for the launcher of this attempt."""
    return fileio.join(settings.temp_dir, f'plan-{settings.lock_token}.json')


class Progress:
    """Shows the progress of a conversion while it runs: `with Progress(settings): run()`.

    The display ends, at 100%, before the first line of the shard join is shown (the join starts
    once every chunk is converted), and at once on Ctrl-C: nothing is redrawn after it."""

    def __init__(self, settings: ConversionSettings):
        self._plan = plan_path(settings)
        self._parts = fileio.join(settings.temp_dir, output_folder.PARTS)
        self._poll = 2.0 if fileio.is_gcs(settings.temp_dir) else 0.2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name='progress', daemon=True)
        self._seen: dict[str, int] = {}   # Sidecar path -> inputs it accounts for.
        self._total = self._started = None
        self._ended = False
        self._all_done_at = None   # When the polls saw every input done (for the last rate).
        self._watching = console.watching_lines(self._before_line)
        self._previous_sigint = None

    def __enter__(self) -> 'Progress':
        try:
            self._reused = sum(self._inputs_of_new_parts())   # Left by an earlier attempt.
        except Exception:  # Progress is never worth failing a run for.
            logging.getLogger(console.TRACE).info('progress', exc_info=True)
            self._reused = 0
        self._watching.__enter__()
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous_sigint = signal.signal(signal.SIGINT, self._interrupted)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._end(finished=False)
        self._thread.join()
        self._watching.__exit__(*exc)
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
        if exc[0] is None:   # The run committed, and took its temporary folder away.
            return
        try:   # The note is for this attempt's launcher only.
            if fileio.exists(self._plan):
                fileio.delete([self._plan])
        except Exception:
            logging.getLogger(console.TRACE).info('progress', exc_info=True)

    def _interrupted(self, signum, frame) -> None:
        self._end(finished=False)
        raise KeyboardInterrupt

    def _before_line(self, message: str) -> None:
        if SHARD_LINE_PATTERN.match(message):
            self._end(finished=True)

    def _end(self, finished: bool) -> None:
        """Stops the display; `finished`: the conversion stage ended, so its last line says
        every input is done."""
        with console.output_lock():
            if self._ended:
                return
            self._ended = True
            self._stop.set()
            console.show_status('')
            if finished and self._read_plan():
                todo = self._total - self._reused
                if todo > 0:
                    end = self._all_done_at or time.time()
                    LOG.info('%s', status_text(todo, todo, self._reused, end - self._started))

    def _read_plan(self) -> bool:
        """Whether the plan (the total and the conversion's start) is known, reading it once."""
        if self._total is None:
            noted = fileio.modified(self._plan)
            if noted is None:
                return False
            plan = json.loads(fileio.read_bytes(self._plan))
            self._total = sum(s['inputs'] for s in plan['splits'].values())
            self._started = noted   # Conversion starts.
        return True

    def _watch(self) -> None:
        done, last_line, next_step, shown = 0, time.monotonic(), 1, None
        while not self._stop.wait(self._poll):
            try:
                if not self._read_plan():
                    continue
                done += sum(self._inputs_of_new_parts())
            except Exception:  # Progress is never worth failing a run for.
                logging.getLogger(console.TRACE).info('progress', exc_info=True)
                continue
            todo = self._total - self._reused
            if done >= todo and self._all_done_at is None:
                self._all_done_at = time.time()
            text = status_text(min(done, todo), todo, self._reused,
                               (self._all_done_at or time.time()) - self._started)
            if text == shown:
                continue
            with console.output_lock():
                if self._ended:
                    return
                if console.show_status(text):
                    shown = text
                    continue
                step = int(10 * done / max(1, todo))
                if 0 < done < todo and (step >= next_step
                                        or time.monotonic() - last_line > LINE_EVERY_SECONDS):
                    LOG.info('%s', text)
                    last_line, next_step = time.monotonic(), step + 1

    def _inputs_of_new_parts(self) -> list[int]:
        found = []   # Listed by name: a poll costs no look at the files it has seen.
        for path in fileio.file_names(self._parts):
            if path.endswith('.tfrecord.json') and path not in self._seen:
                try:
                    data = bounded_reads.read_file(path)
                    if data is None:   # The run ended and its temporary folder went.
                        continue
                    result = json.loads(data)
                    count = int(result['records']) + int(result['errors'])
                except (DatasetError, ValueError, TypeError, KeyError):
                    count = 0          # Not a sidecar of this run: the run itself says so.
                self._seen[path] = count
                found.append(count)
        return found


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
