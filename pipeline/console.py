"""Console output of local runs: our progress lines, without the runner's worker chatter.

DirectRunner worker processes send their log records to the launcher, which prints them as raw
protobuf text ('Worker: severity: ... message: "..."'). This shows the message of our own
records as a plain line, and hides the runner's worker warnings that need no action.
"""
import logging
import re

_WORKER_LOGGER = 'apache_beam.runners.portability.local_job_service'
_ENTRY = re.compile(r'message: "(?P<message>(?:[^"\\]|\\.)*)".*?log_location: "(?P<where>[^"]*)"')


class _WorkerLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != 'Worker: %s' or not record.args:
            return True
        match = _ENTRY.search(str(record.args[0]))
        if match is None:
            return record.levelno >= logging.ERROR
        ours = re.search(r'/(transforms|pipeline)/[a-z_]+\.py', match['where'])
        if not ours and record.levelno < logging.ERROR:
            return False
        record.msg, record.args = match['message'].encode().decode('unicode_escape'), ()
        return True


def setup_console_logging() -> None:
    """Plain progress lines on stderr for the launcher and DirectRunner worker processes."""
    logging.basicConfig(level=logging.WARNING, format='%(message)s')
    logging.getLogger('image_tfrecords').setLevel(logging.INFO)
    # A failing step is re-raised to the caller; the runner's own traceback log would repeat it.
    logging.getLogger('apache_beam.runners').setLevel(logging.CRITICAL)
    worker_logger = logging.getLogger(_WORKER_LOGGER)
    worker_logger.setLevel(logging.INFO)
    worker_logger.addFilter(_WorkerLogFilter())
