"""The product's flags, defined once as a Beam PipelineOptions subclass.

Beam, Dataflow and Flex Templates all read this definition; every other flag goes to Beam.
Booleans take `--flag`, `--flag=true` or `--flag=false`, as a template launcher passes them.
A run's flags are read once, resolved and checked by pipeline/launch.py.
"""
import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from pipeline import beam_internals
from pipeline.base.choices import DamagedAction, LeakageAction, values
from pipeline.base.settings import FEW_ERRORS, ConversionSettings, ImageOptions
from pipeline.inputs import registry
from pipeline.output import shard_formats
from pipeline.quality.pairing import RADIUS

DEFAULT_TARGET_SHARD_MB = 128
DEFAULT_MAX_ERROR_RATIO = 0.01
DEFAULT_READS_IN_FLIGHT = ConversionSettings.reads_in_flight
DEFAULT_MAX_INPUT_MB = ConversionSettings.max_input_bytes >> 20
# How the command follows a job (not a Flex Template's parameters: its launcher returns at once).
COMMAND_LINE_ONLY = frozenset({'detach', 'attach'})


def parse_bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ('1', 'true', 'yes', 'y', 'on'):
        return True
    if value in ('0', 'false', 'no', 'n', 'off'):
        return False
    raise argparse.ArgumentTypeError(f'expected true or false, got {text!r}')


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected a whole number >= 1, got {text!r}')
    return value


class ConverterOptions(PipelineOptions):
    """Flags of the image-classification TFRecord converter."""

    @classmethod
    def _add_argparse_args(cls, parser):
        defaults = ImageOptions()

        def flag(name, **kwargs):
            parser.add_argument(f'--{name}', **kwargs)

        def switch(name, default, help):
            flag(name, type=parse_bool, nargs='?', const=True, default=default, metavar='BOOL',
                 help=f'{help} (default {str(default).lower()})')

        # Input: one kind (pipeline/inputs/registry.py), or a folder with CSVs for other splits.
        for kind in registry.kinds():
            kind.add_flags(flag)
        flag('labels_file', help='One class name per line; fixes label ids to line order.')
        # Output.
        flag('output_dir', help='Where shards and metadata go: a local folder or gs:// prefix. '
             'With neither an input flag nor --output_dir, a generated sample dataset is '
             'converted into ./sample_tfrecords.')
        flag('dataset_name', default=None, help='Shard file prefix, NAME-SPLIT.tfrecord-00000-of-'
             '00016 (lower_snake_case; default: the config name or "dataset").')
        flag('output_format', default=shard_formats.TFRECORD.name, metavar='FORMAT[,FORMAT]',
             help='Shard file format: tfrecord (tf.data, TFDS as_dataset), array_record (random '
             'access: Grain, TFDS as_data_source), or both, comma-separated, the first declared '
             'in dataset_info.json; same records, same shards (default tfrecord).')
        switch('dali_index', False, 'Write beside each TFRecord shard SHARD.idx, its index in '
               'NVIDIA DALI\'s format (a line per record: offset and size), so DALI\'s '
               'fn.readers.tfrecord reads the shards with index_path= and no tfrecord2idx')
        flag('num_shards', type=int, default=0, help='Shards per split (default 0: automatic '
             'from --target_shard_mb).')
        flag('target_shard_mb', type=float, default=DEFAULT_TARGET_SHARD_MB,
             help=f'Shard size aimed at when --num_shards is 0, in the records\' bytes as a '
             f'converted sample estimates them (default {DEFAULT_TARGET_SHARD_MB}). In MiB; the '
             'shard count is the nearest whole number (docs/output.md).')
        switch('overwrite', False, 'Replace a dataset already in --output_dir (and remove '
               'temporary folders other runs left there)')
        switch('clean_temp', False, 'Remove the temporary folders unfinished runs left in '
               '--output_dir, this run\'s own too (it then starts from scratch)')
        switch('break_lock', False, 'Take the lock of --output_dir from a run that is not running '
               'any more (see the error that names the lock)')
        flag('description', default='', help='Description stored in dataset_info.json.')
        # Images.
        flag('jpeg_quality', type=int, default=defaults.jpeg_quality,
             help=f'Quality of re-encoded JPEGs (default {defaults.jpeg_quality}).')
        switch('reencode', defaults.reencode, 'Re-encode every image, also RGB JPEGs that could be '
               'stored as they are')
        switch('apply_exif_orientation', defaults.apply_exif_orientation,
               'Store EXIF-rotated images upright')
        flag('max_pixels', type=int, default=0, help='Downscale images with more pixels than this, '
             'keeping aspect (default 0: no limit).')
        flag('max_side', type=int, default=0, help='Downscale images whose longer side exceeds this '
             '(default 0: no limit).')
        flag('max_image_pixels', type=int, default=defaults.max_image_pixels,
             help='Skip (and report) images larger than this: decompression-bomb guard; it also '
             "bounds one image's memory (its file plus 8 bytes a pixel, 19 for WebP, at most 9 "
             f'bytes a pixel of this) (default {defaults.max_image_pixels}).')
        flag('damaged_images', choices=values(DamagedAction), default=defaults.damaged_images.value,
             help='JPEGs that decode only with libjpeg warnings (corrupt data, premature end): '
             'skip them (reported in errors-SPLIT.jsonl, counted against --max_error_ratio), keep '
             'them as they are (with --reencode: reencode), or reencode what Pillow decodes; each '
             'is listed in '
             f'damaged-SPLIT.jsonl (default {defaults.damaged_images}).')
        flag('leakage', choices=values(LeakageAction), default=LeakageAction.REPORT.value,
             help=f'Images whose perceptual hashes differ in at most {RADIUS} of 64 bits are '
             'near-duplicates (copies, also resized, re-encoded, brightened, greyscale or '
             'mirrored); each cluster of them that spans splits is a line of leakage.jsonl; drop '
             'also leaves its members in later splits (validation, test) out, fail commits '
             'nothing if there is any; off checks nothing (no hashes, no leakage.jsonl, records '
             'without image/phash features) (default report).')
        flag('reads_in_flight', type=positive_int, default=DEFAULT_READS_IN_FLIGHT,
             help='Images each worker thread reads ahead while it converts, so that Cloud Storage '
             'round trips overlap (about images/s per thread x seconds per read hides them); '
             f'output is the same for any value (default {DEFAULT_READS_IN_FLIGHT}).')
        flag('max_input_mb', type=positive_int, default=DEFAULT_MAX_INPUT_MB,
             help='The most MiB read for one input (a file, an archive member, decompressed); a '
             'larger one, and anything that is not a regular file (a pipe, a device), is '
             f'reported in errors-SPLIT.jsonl and never read (default {DEFAULT_MAX_INPUT_MB}).')
        # Labels and errors.
        flag('label_offset', type=int, default=0, help='Add this to every derived label id; 1 '
             'reserves id 0 for a background class (default 0).')
        flag('num_labels', type=int, default=None, help='Fail if there are more distinct labels.')
        flag('max_error_ratio', type=float, default=DEFAULT_MAX_ERROR_RATIO,
             help='Fail, committing nothing, if a larger fraction of a split cannot be converted; '
             f'left out, a split may also always skip up to {FEW_ERRORS} inputs, at most a tenth '
             f'of it (default {DEFAULT_MAX_ERROR_RATIO}).')
        switch('skip_duplicates', False, 'Drop inputs listed twice in a split (reported) instead '
               'of failing')
        switch('plan_only', False, 'List the inputs and print what the conversion would write '
               'and cost (per split: inputs, labels, shards, bytes in and out, the output from '
               'a sample converted as the run converts it; the time and memory here, or the '
               'Dataflow workers), converting nothing')
        flag('plan_format', choices=('text', 'json'), default='text',
             help='How --plan_only prints the plan: text or json (default text).')
        switch('detach', False, 'Hand a job to its service (Dataflow, a job server) and return '
               'at once, printing its id and how to follow it, instead of following it to its '
               'end')
        flag('attach', default=None, metavar='JOB_ID', help='Follow the job JOB_ID that a '
             'detached run submitted to --output_dir, to its end (exit 0 once its dataset is '
             'committed); give the --output_dir and the service flags it was submitted with.')
        switch('verbose', False, 'Print the runner\'s full log and tracebacks (they go to a log '
               'file otherwise)')

    def image_options(self) -> ImageOptions:
        damaged = DamagedAction(self.damaged_images)
        if self.reencode and damaged == DamagedAction.KEEP:   # --reencode keeps no file as it is.
            damaged = DamagedAction.REENCODE
        return ImageOptions(jpeg_quality=self.jpeg_quality, reencode=self.reencode,
                            apply_exif_orientation=self.apply_exif_orientation,
                            max_pixels=self.max_pixels, max_side=self.max_side,
                            max_image_pixels=self.max_image_pixels, damaged_images=damaged)


def converter_parser() -> argparse.ArgumentParser:
    """A parser of the converter's own flags (for --help and the Flex Template metadata)."""
    return beam_internals.options_parser(
        classes=[ConverterOptions], prog='python -m pipeline.run',
        description='Convert an image-classification dataset into sharded TFRecords '
        '(tf.train.Example) per split, on Apache Beam.',
        epilog='Every other flag goes to Beam, e.g. --runner=DataflowRunner --project=P '
        '--region=R --temp_location=gs://B/tmp (with --dry_run=true: build the Dataflow job and '
        'print its stages, workers, staged files and plan without submitting it; without '
        'credentials it runs offline, the buckets unchecked), or '
        '--direct_num_workers=N for a local run (N worker processes; default: one per core).')


def help_text() -> str:
    return converter_parser().format_help()


def converter_flag_names() -> set[str]:
    """The names of the converter's own flags (not Beam's)."""
    return {action.dest for action in converter_parser()._actions if action.dest != 'help'}
