"""The Cloud Storage client (one per process, its connection pool sized to the reads in flight)
and what only Cloud Storage does: versioned reads, writes and deletes by generation, listing
a prefix."""
import re
import threading


def read_versioned(path: str, limit: int) -> tuple[bytes, int, float] | None:
    """Cloud Storage: (bytes, generation, time of last update) of an object, None if absent;
    at most its first limit + 1 bytes."""
    from google.api_core.exceptions import NotFound, PreconditionFailed
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    for _ in range(3):
        blob = storage_client().bucket(bucket).get_blob(name, retry=DEFAULT_RETRY)
        if blob is None:
            return None
        generation, updated = blob.generation, blob.updated.timestamp()
        try:
            first = {'start': 0, 'end': limit, 'checksum': None} if blob.size > limit else {}
            data = blob.download_as_bytes(if_generation_match=generation, retry=DEFAULT_RETRY,
                                          **first)
        except (NotFound, PreconditionFailed):
            continue   # Replaced or deleted between the two requests.
        return data, generation, updated
    return None


def write_if_generation(path: str, data: bytes, generation: int) -> bool:
    """Cloud Storage: writes the object only if its generation is still `generation` (0: only
    if there is none); False when it is not."""
    from google.api_core.exceptions import PreconditionFailed
    bucket, name = split_gcs(path)
    try:
        storage_client().bucket(bucket).blob(name).upload_from_string(
            data, if_generation_match=generation)
    except PreconditionFailed:
        return False
    return True


def upload_bytes(path: str, data: bytes) -> None:
    """Cloud Storage: writes the object in one request (Beam's writer makes two: a resumable
    upload's start, then its data), sent again on a transient error; the object appears whole
    or not at all."""
    from google.cloud.storage.retry import DEFAULT_RETRY
    bucket, name = split_gcs(path)
    storage_client().bucket(bucket).blob(name).upload_from_string(
        data, content_type='application/octet-stream', retry=DEFAULT_RETRY)


def delete_if_generation(path: str, generation: int) -> bool:
    """Cloud Storage: deletes the object only if its generation is still `generation`."""
    from google.api_core.exceptions import NotFound, PreconditionFailed
    bucket, name = split_gcs(path)
    try:
        storage_client().bucket(bucket).blob(name).delete(if_generation_match=generation)
    except (NotFound, PreconditionFailed):
        return False
    return True


BATCH_SIZE = 100   # Operations per batch request, the JSON API's limit.
_TRANSIENT = (408, 429, 500, 502, 503, 504)


def delete_objects(paths: list[str]) -> None:
    """Cloud Storage: deletes objects, BATCH_SIZE per batch request; one that does not exist is
    no error. Requests answered with a transient error are sent again, the whole batch when the
    batch request itself fails."""
    from google.api_core.exceptions import from_http_response
    from google.cloud.storage.retry import DEFAULT_RETRY
    client = storage_client()
    for start in range(0, len(paths), BATCH_SIZE):
        pending = [split_gcs(p) for p in paths[start:start + BATCH_SIZE]]

        @DEFAULT_RETRY
        def send() -> None:
            batch = client.batch(raise_exception=False)
            with batch:
                for bucket, name in pending:
                    client.bucket(bucket).delete_blob(name)
            failed = [(target, r) for target, r in zip(pending, batch._responses)
                      if r.status_code >= 400 and r.status_code != 404]
            pending[:] = [target for target, r in failed if r.status_code in _TRANSIENT]
            if len(pending) < len(failed):
                _, response = next((t, r) for t, r in failed if r.status_code not in _TRANSIENT)
                raise from_http_response(response)
            if pending:
                raise from_http_response(failed[0][1])   # Transient: DEFAULT_RETRY sends again.
        send()


def round_trip_seconds(folder: str, requests: int = 5) -> float:
    """Cloud Storage: the median time of one small request (a metadata read of a name below
    `folder`, which need not exist), over `requests` made one after another."""
    import statistics
    import time
    bucket, prefix = split_gcs(folder)
    blob_name = prefix.rstrip('/') + '/.round-trip'
    client, times = storage_client(), []
    for _ in range(requests):
        started = time.monotonic()
        client.bucket(bucket).get_blob(blob_name)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def list_prefix(folder: str) -> list[str]:
    """Cloud Storage: every object below `folder` (a prefix, not a pattern), as gs:// paths."""
    bucket, prefix = split_gcs(folder)
    prefix = prefix.rstrip('/') + '/'
    return sorted(f'gs://{bucket}/{b.name}'
                  for b in storage_client().list_blobs(bucket, prefix=prefix))


def split_gcs(path: str) -> tuple[str, str]:
    bucket, _, prefix = path[len('gs://'):].partition('/')
    return bucket, prefix


_BUCKET_PART = re.compile(r'[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?')
_IP = re.compile(r'\d{1,3}(\.\d{1,3}){3}')


def bucket_name_problem(path: str) -> str | None:
    """Why the bucket of a gs:// path cannot be a Cloud Storage bucket's name, or None: 3-63
    lowercase letters, digits, dashes, underscores and dots (up to 222 with dots), each part
    between dots starting and ending with a letter or digit; not an IP address, not starting
    with "goog", not holding "google"."""
    bucket, _ = split_gcs(path)
    limit = 222 if '.' in bucket else 63
    if not (3 <= len(bucket) <= limit and all(map(_BUCKET_PART.fullmatch, bucket.split('.')))):
        return (f'{bucket!r} is not a bucket name (3-63 lowercase letters, digits, dashes, '
                'underscores and dots, a letter or digit at each end)')
    if _IP.fullmatch(bucket) or bucket.startswith('goog') or 'google' in bucket:
        return (f'{bucket!r} is not a bucket name (no bucket is named like an IP address, starts '
                'with "goog" or holds "google")')
    return None


_CLIENT = None
_CLIENT_LOCK = threading.Lock()
_CONNECTIONS = 10   # Kept open per host by the client: requests' default, plus reservations.


def storage_client():
    """One google-cloud-storage client per process (Application Default Credentials; it talks
    to STORAGE_EMULATOR_HOST, anonymously, when that is set), its HTTP connection pool sized
    by `reserve_connections`."""
    global _CLIENT
    if _CLIENT is None:
        with _CLIENT_LOCK:
            if _CLIENT is None:
                from google.cloud import storage
                client = storage.Client()
                _size_connection_pool(client)
                _CLIENT = client
    return _CLIENT


def reserve_connections(count: int) -> None:
    """Lets the client keep `count` more HTTP connections per host (a negative count gives
    them back): one for each request a caller will have in flight at once. Without them, the
    connections beyond requests' default of 10 are closed after each use and every further read
    pays a new connection."""
    global _CONNECTIONS
    with _CLIENT_LOCK:
        _CONNECTIONS += count
        if _CLIENT is not None:
            _size_connection_pool(_CLIENT)


def _size_connection_pool(client) -> None:
    from requests.adapters import HTTPAdapter
    for prefix in ('https://', 'http://'):
        client._http.mount(prefix, HTTPAdapter(pool_maxsize=_CONNECTIONS))
