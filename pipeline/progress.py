"""Live progress of a conversion the launcher waits for, read from the run's temporary folder.

Once planning is done the pipeline writes the plan (inputs per split) to `plan-<lock token>.json`
in the run's temporary folder, and every converted chunk leaves a sidecar per part file
(`parts/*.tfrecord.json`, a ShardResult with its records and errors; see transforms/resume.py).
A thread in the launcher polls them and shows inputs done of the total, the rate and the time
left: in place on a terminal (pipeline/console.py), else as a log line per tenth of the work
(at most a minute apart; the shard lines and the summary tell the end). Parts an earlier
attempt left are reused work, not counted as done.
"""
import json
import logging
import threading
import time

from pipeline import console
from pipeline.formats import fileio, output_folder
from pipeline.formats.errors import DatasetError
from transforms.settings import ConversionSettings

LOG = logging.getLogger('image_tfrecords')
LINE_EVERY_SECONDS = 60


def plan_path(settings: ConversionSettings) -> str:
    """Where the pipeline notes its plan for the launcher of this attempt."""
    return fileio.join(settings.temp_dir, f'plan-{settings.lock_token}.json')


class Progress:
    """Shows the progress of a conversion while it runs: `with Progress(settings): run()`."""

    def __init__(self, settings: ConversionSettings):
        self._plan = plan_path(settings)
        self._parts = fileio.join(settings.temp_dir, 'parts', '*.tfrecord.json')
        self._poll = 2.0 if fileio.is_gcs(settings.temp_dir) else 0.5
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name='progress', daemon=True)
        self._seen: dict[str, int] = {}   # Sidecar path -> inputs it accounts for.

    def __enter__(self) -> 'Progress':
        try:
            self._reused = sum(self._inputs_of_new_parts())   # Left by an earlier attempt.
        except Exception:  # Progress is never worth failing a run for.
            logging.getLogger(console.TRACE).info('progress', exc_info=True)
            self._reused = 0
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        console.show_status('')
        try:   # The note is for this attempt's launcher only.
            if fileio.exists(self._plan):
                fileio.delete([self._plan])
        except Exception:
            logging.getLogger(console.TRACE).info('progress', exc_info=True)

    def _watch(self) -> None:
        total = started = None
        done, last_line, next_step = 0, time.monotonic(), 1
        while not self._stop.wait(self._poll):
            try:
                if total is None:
                    noted = fileio.match(self._plan)
                    if not noted:
                        continue
                    plan = json.loads(fileio.read_bytes(self._plan))
                    total = sum(s['inputs'] for s in plan['splits'].values())
                    started = noted[0].last_updated_in_seconds   # Conversion starts.
                done += sum(self._inputs_of_new_parts())
            except Exception:  # Progress is never worth failing a run for.
                logging.getLogger(console.TRACE).info('progress', exc_info=True)
                continue
            todo = total - self._reused
            text = status_text(done, todo, self._reused, time.time() - started)
            if console.show_status(text):
                continue
            step = int(10 * done / max(1, todo))
            if 0 < done < todo and (step >= next_step
                                    or time.monotonic() - last_line > LINE_EVERY_SECONDS):
                LOG.info('%s', text)
                last_line, next_step = time.monotonic(), step + 1

    def _inputs_of_new_parts(self) -> list[int]:
        found = []
        for meta in fileio.match(self._parts):
            if meta.path not in self._seen:
                try:
                    data = output_folder.read_file(meta.path)
                    if data is None:   # The run ended and its temporary folder went.
                        continue
                    result = json.loads(data)
                    count = int(result['records']) + len(result['errors'])
                except (DatasetError, ValueError, TypeError, KeyError):
                    count = 0          # Not a sidecar of this run: the run itself says so.
                self._seen[meta.path] = count
                found.append(count)
        return found


def status_text(done: int, todo: int, reused: int, seconds: float) -> str:
    """'converting: 1,200 of 8,000 inputs (15%), 310 inputs/s, about 22 s left'."""
    rate = done / seconds if seconds > 0 else 0.0
    text = f'converting: {done:,} of {todo:,} inputs ({100 * done / max(1, todo):.0f}%)'
    if reused:
        text += f' ({reused:,} reused from an earlier attempt)'
    if rate:
        text += f', {rate:,.0f} inputs/s, about {_duration(max(0, todo - done) / rate)} left'
    return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f'{seconds:.0f} s'
    if seconds < 90 * 60:
        return f'{seconds / 60:.0f} min'
    return f'{seconds / 3600:.1f} h'
