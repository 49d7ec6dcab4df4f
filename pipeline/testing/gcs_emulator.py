"""`python -m pipeline.testing.gcs_emulator start ...`: gcp-storage-emulator with generation preconditions.

The emulator ignores `ifGenerationMatch`, which Cloud Storage honours and the output lock relies
on (create only if absent: ifGenerationMatch=0; take over or release only the generation read).
This entry point starts the same emulator with that one rule added to object uploads, downloads
and deletes: a precondition that does not hold is answered with HTTP 412 Precondition Failed,
as Cloud Storage answers it. The emulator serves one request at a time, so the check and the
change are one step, as on Cloud Storage.
"""
import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects


def _object_name(request) -> str | None:
    """The name of the object an upload request creates (query, or multipart metadata)."""
    if request.query.get('name'):
        return request.query['name'][0]
    if isinstance(request.data, dict) and isinstance(request.data.get('meta'), dict):
        return request.data['meta'].get('name')
    return None


def _with_generation_precondition(handler, object_name):
    def checked(request, response, storage, *args, **kwargs):
        wanted = request.query.get('ifGenerationMatch')
        name = object_name(request)
        if wanted and name is not None:
            try:
                current = storage.get_file_obj(request.params['bucket_name'], name)['generation']
            except NotFound:
                current = '0'
            if str(current) != wanted[0]:
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({'error': {'code': 412, 'message': 'conditionNotMet'}})
                return None
        return handler(request, response, storage, *args, **kwargs)
    return checked


def _named_object(request) -> str | None:
    return request.params.get('object_id')


_CHECKED = {objects.insert: _object_name, objects.download: _named_object,
            objects.delete: _named_object}
for _, methods in server.HANDLERS:
    for method, handler in list(methods.items()):
        if handler in _CHECKED:
            methods[method] = _with_generation_precondition(handler, _CHECKED[handler])

if __name__ == '__main__':
    sys.exit(main())
