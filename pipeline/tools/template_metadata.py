"""The Flex Template's metadata.json, generated from the converter's own flags.

    python -m pipeline.tools.template_metadata > dataflow_templates/metadata.json

Names, help texts, defaults and optionality come from pipeline/options.py, so the console form
always shows the flags the pipeline really has; labels and parameter types are added here (an
input kind's own flags may bring theirs, InputKind.template; else the help's first sentence and
TEXT). Dataflow checks each value a launch passes against the parameter's regexes: a flag with
argparse `choices` gets a regex of them, a number or switch one of its type (whole numbers are
never negative here); free text (a description, a column or field name) gets none.
"""
import json
import sys

from pipeline.inputs import registry
from pipeline.output import shard_formats
from pipeline.options import COMMAND_LINE_ONLY, converter_parser, parse_bool, positive_int
from pipeline.output.metadata import DATASET_NAME

_GCS = r'^gs:\/\/[^\n\r]+$'
_FORMATS = '|'.join(shard_formats.names())
# argparse type: the regex of the values Dataflow lets through (a subset of what the type reads).
TYPE_REGEXES = {
    parse_bool: r'^(true|false)$',
    int: r'^[0-9]+$',
    positive_int: r'^[1-9][0-9]*$',
    float: r'^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$',
}
# flag: (label, paramType, regexes)
PARAMETERS = {
    'input_dir': ('Input folder (folder per split and class)', 'GCS_READ_FOLDER', [_GCS]),
    'csv_train': ('Train CSV (uri,label)', 'GCS_READ_FILE', [_GCS]),
    'csv_validation': ('Validation CSV (uri,label)', 'GCS_READ_FILE', [_GCS]),
    'csv_test': ('Test CSV (uri,label)', 'GCS_READ_FILE', [_GCS]),
    'labels_file': ('Labels file (one class per line)', 'GCS_READ_FILE', [_GCS]),
    'config': ('Config class (module:Class, installed in the image)', 'TEXT', [r'^[\w.]+:\w+$']),
    'config_arg': ('Config argument (key=value)', 'TEXT', [r'^\w+=.*$']),
    'output_dir': ('Output folder for shards and metadata', 'GCS_WRITE_FOLDER', [_GCS]),
    'dataset_name': ('Dataset name (shard file prefix)', 'TEXT', [rf'^{DATASET_NAME}$']),
    'output_format': ('Shard format: tfrecord, array_record, or both (comma-separated)', 'TEXT',
                      [rf'^({_FORMATS})(,({_FORMATS}))?$']),
    'dali_index': ('Write a DALI index (SHARD.idx) beside each TFRecord shard', 'BOOLEAN', []),
    'num_shards': ('Shards per split (0: automatic)', 'NUMBER', []),
    'target_shard_mb': ('Target shard size in MB', 'NUMBER', []),
    'overwrite': ('Replace an existing dataset', 'BOOLEAN', []),
    'clean_temp': ('Remove temporary folders of earlier runs', 'BOOLEAN', []),
    'break_lock': ('Break the lock of a run that is gone', 'BOOLEAN', []),
    'description': ('Dataset description', 'TEXT', []),
    'jpeg_quality': ('JPEG quality of re-encoded images', 'NUMBER', []),
    'reencode': ('Re-encode every image', 'BOOLEAN', []),
    'apply_exif_orientation': ('Apply EXIF orientation', 'BOOLEAN', []),
    'max_pixels': ('Downscale above this many pixels (0: never)', 'NUMBER', []),
    'max_side': ('Downscale above this side length (0: never)', 'NUMBER', []),
    'max_image_pixels': ('Skip images larger than this many pixels', 'NUMBER', []),
    'reads_in_flight': ('Images read ahead per worker thread', 'NUMBER', []),
    'max_input_mb': ('Most MiB read for one input', 'NUMBER', []),
    'damaged_images': ('Damaged JPEGs: skip, keep or reencode', 'TEXT', []),
    'leakage': ('Near-duplicates across splits: report, drop, fail or off', 'TEXT', []),
    'label_offset': ('Label id offset (1: background class)', 'NUMBER', []),
    'num_labels': ('Maximum number of distinct labels', 'NUMBER', []),
    'max_error_ratio': ('Maximum fraction of unconvertible images', 'NUMBER', []),
    'skip_duplicates': ('Drop inputs listed twice', 'BOOLEAN', []),
    'plan_only': ('Only plan: list and estimate, convert nothing', 'BOOLEAN', []),
    'plan_format': ('Plan output format (text or json)', 'TEXT', []),
    'verbose': ('Full launcher log', 'BOOLEAN', []),
}
REQUIRED = {'output_dir'}


def _default(value) -> str | None:
    if value is None or value == [] or value == '':
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _described(name: str, help_text: str) -> tuple[str, str, list[str]]:
    for kind in registry.kinds():
        if name in kind.template:
            return kind.template[name]
    return PARAMETERS.get(name) or (help_text.split('. ')[0].rstrip('.')[:80], 'TEXT', [])


def template_metadata() -> dict:
    """The metadata document for every converter flag but the command line's own, in --help
    order."""
    parameters = []
    for action in converter_parser()._actions:
        if action.dest == 'help' or action.dest in COMMAND_LINE_ONLY:
            continue
        label, param_type, regexes = _described(action.dest, action.help or action.dest)
        if action.choices:
            regexes = [rf'^({"|".join(action.choices)})$']
        elif not regexes and action.type in TYPE_REGEXES:
            regexes = [TYPE_REGEXES[action.type]]
        parameter = {'name': action.dest, 'label': label, 'helpText': action.help,
                     'isOptional': action.dest not in REQUIRED, 'paramType': param_type}
        if regexes:
            parameter['regexes'] = regexes
        if _default(action.default) is not None:
            parameter['defaultValue'] = _default(action.default)
        parameters.append(parameter)
    return {
        'name': 'Image classification dataset to TFRecords',
        'description': 'Converts images with class labels (a folder per split and class, or CSV '
                       'files of uri,label) into sharded TFRecords (or ArrayRecords) of tf.train.Example '
                       'per split, with TFDS metadata, for Cloud TPU training.',
        'parameters': parameters,
    }


def main(argv: list[str] | None = None) -> int:
    json.dump(template_metadata(), sys.stdout, indent=2)
    sys.stdout.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
