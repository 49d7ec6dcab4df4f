"""A real GCS-API emulator on 127.0.0.1, and a local metadata endpoint for credentials.

`gcp-storage-emulator` (pure Python, from PyPI) serves the JSON API including the batch
copy/delete requests Beam uses to move temporary files into place; pipeline/testing/gcs_emulator.py starts
it with the upload precondition (ifGenerationMatch) that the output lock relies on.

Beam asks google.auth for Application Default Credentials and, when none are found, retries
for about 20 s per process before going anonymous. The metadata endpoint answers that question
at once for this process and every DirectRunner worker it starts: it plays the GCE metadata
server and hands out a dummy token, which the emulator ignores. The environment is set so that a
developer's own gcloud credentials are never used.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUCKET = 'test-bucket'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class _MetadataHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split('?')[0]
        if path.endswith('/token'):
            body = json.dumps({'access_token': 'test-token', 'expires_in': 3600,
                               'token_type': 'Bearer'})
        elif path.endswith('/project/project-id'):
            body = 'test-project'
        elif path.endswith('/universe/universe-domain'):
            body = 'googleapis.com'
        elif path.rstrip('/').rsplit('/', 2)[-2:-1] == ['service-accounts']:
            # google-auth asks for 'default' first, then by the email it was given.
            body = json.dumps({'email': 'tests@test-project.iam.gserviceaccount.com',
                               'scopes': ['https://www.googleapis.com/auth/cloud-platform'],
                               'aliases': ['default']})
        elif path.endswith('/email'):
            body = 'tests@test-project.iam.gserviceaccount.com'
        else:
            body = ''
        data = body.encode()
        self.send_response(200)
        self.send_header('Metadata-Flavor', 'Google')
        self.send_header('Content-Type', 'application/json' if body.startswith('{') else 'text/plain')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def hermetic_environment(emulator_port: int, metadata_port: int) -> None:
    """Points every Google client in this process and its children at the local servers."""
    for name in ('GOOGLE_APPLICATION_CREDENTIALS', 'GOOGLE_CLOUD_PROJECT', 'GCLOUD_PROJECT'):
        os.environ.pop(name, None)
    os.environ.update({
        'STORAGE_EMULATOR_HOST': f'http://127.0.0.1:{emulator_port}',
        # The Cloud Storage C++ client (ArrayRecord's reader) has its own name for it.
        'CLOUD_STORAGE_EMULATOR_ENDPOINT': f'http://127.0.0.1:{emulator_port}',
        'GCE_METADATA_HOST': f'127.0.0.1:{metadata_port}',
        'GCE_METADATA_IP': f'127.0.0.1:{metadata_port}',
        'CLOUDSDK_CONFIG': tempfile.mkdtemp(prefix='no-gcloud-'),
        'GOOGLE_CLOUD_PROJECT': 'test-project',
    })


class LocalGcs:
    """The emulator process (`serve_emulator`) and the metadata endpoint; `wipe()` empties the
    bucket."""

    def __init__(self, emulator_port: int, metadata_port: int):
        self.endpoint = f'http://127.0.0.1:{emulator_port}'
        self._metadata = ThreadingHTTPServer(('127.0.0.1', metadata_port), _MetadataHandler)
        threading.Thread(target=self._metadata.serve_forever, daemon=True).start()
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'pipeline.testing.gcs_servers', 'start', '--host', '127.0.0.1',
             '--port', str(emulator_port), '--in-memory', '--default-bucket', BUCKET, '-q'],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f'{self.endpoint}/storage/v1/b/{BUCKET}', timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError('the GCS emulator did not start')
                time.sleep(0.05)

    def wipe(self) -> None:
        urllib.request.urlopen(f'{self.endpoint}/wipe?keep-buckets=true', timeout=10)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)
        self._metadata.shutdown()


def upload(files: dict, prefix: str) -> str:
    """Uploads {relative path: bytes} under gs://BUCKET/prefix; returns that URI."""
    from google.cloud import storage
    bucket = storage.Client().bucket(BUCKET)
    for relative, data in files.items():
        bucket.blob(f'{prefix}/{relative}').upload_from_string(data)
    return f'gs://{BUCKET}/{prefix}'


def download(prefix: str) -> dict:
    """{path relative to prefix: bytes} of every object under gs://BUCKET/prefix/."""
    from google.cloud import storage
    blobs = storage.Client().list_blobs(BUCKET, prefix=f'{prefix}/')
    return {b.name[len(prefix) + 1:]: b.download_as_bytes() for b in blobs}


def operations(method: str, path: str, body: bytes) -> list[str]:
    """The Cloud Storage operations one JSON-API request asks for (a batch holds several)."""
    if path.startswith('/batch/'):
        requests = [line.split(' ') for line in body.decode('latin-1').splitlines()
                    if line.startswith(('DELETE ', 'POST ', 'GET ', 'PATCH '))]
        return [op for method_path in requests if len(method_path) >= 2
                for op in operations(method_path[0], method_path[1], b'')]
    path, _, query = path.partition('?')
    if path.startswith('/upload/') or method == 'PUT':
        return ['upload']
    if method == 'GET' and (path.startswith('/download/') or 'alt=media' in query):
        return ['read']
    if '/compose' in path:
        return ['compose']
    if '/copyTo/' in path or '/rewriteTo/' in path:
        return ['copy']
    if method == 'DELETE':
        return ['delete']
    if method == 'GET' and path.endswith('/o'):
        return ['list']
    return ['get metadata'] if method == 'GET' else [f'other {method}']


READS = ('read', 'get metadata', 'list')
WRITES = ('upload', 'compose', 'copy', 'delete')


class FlakyProxy:
    """Forwards to the emulator as Cloud Storage behaves under load and at a distance: every
    `every`-th request is answered with HTTP 503, the transient error Cloud Storage returns
    under load (every=0: never); requests that read (`READS`) wait `read_latency` seconds
    before they are forwarded, requests that write (`WRITES`) `write_latency` seconds, as a
    round trip from a worker costs. Counts the operations it forwards, by kind (`operations`;
    lists also by the prefix listed, `listed`), and the most requests of each kind it held at
    once (`max_in_flight`; `max_reads_in_flight` for object reads); `overlaps` counts, per
    (kind, other kind), the requests of a kind that arrived while one of the other kind was
    held.

    Each connection has its own thread and a delay holds no lock, so the proxy is not what
    limits how many requests are in flight.
    """

    def __init__(self, target_port: int, every: int = 4, read_latency: float = 0.0,
                 write_latency: float = 0.0):
        import collections
        import http.client
        proxy = self
        self.failures = self.requests = 0
        self.operations, self.listed = collections.Counter(), collections.Counter()
        self.max_in_flight, in_flight = collections.Counter(), collections.Counter()
        self.overlaps = collections.Counter()
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            disable_nagle_algorithm = True   # Else headers and body wait on a delayed ACK.

            def _forward(self):
                body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
                kinds = operations(self.command, self.path, body)
                with lock:
                    proxy.requests += 1
                    failing = every and proxy.requests % every == 0
                    proxy.failures += bool(failing)
                if failing:
                    self.send_response(503)
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                with lock:
                    proxy.operations.update(kinds)
                    if kinds == ['list']:
                        query = urllib.parse.parse_qs(self.path.partition('?')[2])
                        proxy.listed[query.get('prefix', [''])[0]] += 1
                    proxy.overlaps.update((kind, held) for kind in kinds
                                          for held, count in in_flight.items() if count > 0)
                    in_flight.update(kinds)
                    for kind in kinds:
                        proxy.max_in_flight[kind] = max(proxy.max_in_flight[kind],
                                                        in_flight[kind])
                try:
                    delay = (read_latency if any(k in READS for k in kinds) else
                             write_latency if any(k in WRITES for k in kinds) else 0.0)
                    time.sleep(delay)
                    status, headers, data = self._ask_target(body)
                finally:
                    with lock:
                        in_flight.subtract(kinds)
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ('transfer-encoding', 'content-length', 'connection'):
                        self.send_header(key, value)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _ask_target(self, body: bytes) -> tuple[int, list, bytes]:
                conn = http.client.HTTPConnection('127.0.0.1', target_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != 'host'}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                # Links in answers (mediaLink, upload locations) point back through the proxy.
                data = response.read().replace(f'127.0.0.1:{target_port}'.encode(),
                                               f'127.0.0.1:{proxy.port}'.encode())
                conn.close()
                return response.status, response.getheaders(), data

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256   # Many workers open connections at once.

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # A client went away.
                    super().handle_error(request, client_address)

        self.port = free_port()
        self._server = Server(('127.0.0.1', self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def max_reads_in_flight(self) -> int:
        return self.max_in_flight['read']

    def stop(self) -> None:
        self._server.shutdown()


def serve_emulator() -> None:
    """`python -m pipeline.testing.gcs_servers start ...`: the emulator of gcs_emulator.py, made
    fit for thousands of objects and many clients. In memory it keeps its catalogue in memory only
    (it would rewrite all of it as a JSON file after every write, work that grows with
    the number of objects), and it queues 256 connections instead of 5, so that clients opening
    connections at once are not dropped and retried a second later."""
    import socketserver

    from gcp_storage_emulator.storage import Storage

    from pipeline.testing import gcs_emulator
    socketserver.TCPServer.request_queue_size = 256
    write_catalogue = Storage._write_config_to_file

    def write_if_on_disk(storage: Storage) -> None:
        if not storage._use_memory_fs:
            write_catalogue(storage)
    Storage._write_config_to_file = write_if_on_disk
    sys.exit(gcs_emulator.main())


if __name__ == '__main__':
    serve_emulator()
