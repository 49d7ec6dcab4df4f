"""The folder layout, `--input_dir ROOT` with ROOT/<split>/<class>/<image>: its InputKind and its
partitions. A split folder splits further into one partition per class folder or class archive;
archives are folders (pipeline/inputs/folders.py): their members are listed like files.

Every input is accounted for: each file below a split folder becomes one ref, which is either
converted, reported as an error, or (hidden files and folders; in archives also directory
entries and `__MACOSX/`) counted as ignored.
"""
import dataclasses
import logging
from typing import Callable, Iterator

from pipeline.errors import DatasetError
from pipeline.inputs import folders, parquet_files, zip_index
from pipeline.inputs.kinds import InputKind, Partition, Source, real_location
from pipeline.base.refs import ExampleRef
from pipeline.io import fileio
from pipeline.base.splits import SPLITS, split_of
from pipeline.base.settings import LabelSettings

LOG = logging.getLogger('image_tfrecords')
# Class folders of a split that are a partition each, at most (ImageNet has 1,000): past it,
# the real ones are grouped (ClassFolders).
MAX_CLASS_PARTITIONS = 10_000


def _is_hidden(relative: str) -> bool:
    return any(part.startswith('.') for part in relative.split('/'))


def _ignored_in_archive(relative: str, file: folders.File) -> bool:
    """Directory entries and macOS resource forks (`__MACOSX/`) of an archive."""
    return file.member is not None and (file.is_dir or '__MACOSX' in relative.split('/'))


NOT_UTF8 = ('its path is not valid UTF-8 (written in another encoding, shown here with the bytes '
            'escaped): rename it, e.g. convmv -f latin1 -t utf8 -r --notest FOLDER')


def _not_utf8(text: str | None) -> bool:
    """Whether a name listed from disk holds bytes that are not UTF-8 (Python keeps them as
    lone surrogates, which no later step could encode)."""
    try:
        (text or '').encode()
    except UnicodeEncodeError:
        return True
    return False


def _escaped(text: str) -> str:
    """A name that is not valid UTF-8 as printable text: each stray byte as \\xNN."""
    return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')


def _utf8_named(file: folders.File, label: str | None) -> tuple[folders.File, str | None]:
    """The file and label as listed; a file whose name (or class folder's) is not UTF-8 becomes
    a problem under its escaped name, without a class."""
    if not (_not_utf8(file.key) or _not_utf8(label)):
        return file, label
    return dataclasses.replace(file, path=_escaped(file.path), key=_escaped(file.key),
                               name=_escaped(file.name), error=file.error or NOT_UTF8), None


def _file_ref(split: str, file: folders.File, label: str | None, hidden: bool) -> ExampleRef:
    """The ref of a listed file or archive member: ignored when hidden, a problem when
    unreadable or not named in UTF-8 (damage that ends its archive too, hidden or not)."""
    file, label = _utf8_named(file, label)
    if hidden and not _ends_archive(file):
        return ExampleRef(split, file.key, file.path, file.name, None, ignored=True)
    if file.error is not None:   # Reported under the path through the archive, if any.
        return ExampleRef(split, file.key, file.path if file.member else '', file.name, label,
                          problem=file.error, member=file.member)
    return ExampleRef(split, file.key, file.path, file.name, label, file.size,
                      mtime=file.mtime, member=file.member)


def _ends_archive(file: folders.File) -> bool:
    """Whether it is damage that ends what can be read of its archive (archives.Member.cut),
    unless the archive is itself a hidden file (macOS leaves `._NAME.tar` beside `NAME.tar`)."""
    return (file.member is not None and file.member.cut
            and not fileio.basename(file.member.archive.path).startswith('.'))


def _walked_ref(split: str, relative: str, file: folders.File, label: str | None) -> ExampleRef:
    hidden = _is_hidden(relative) or _ignored_in_archive(relative, file)
    return _file_ref(split, file, label, hidden)


@dataclasses.dataclass(frozen=True)
class FolderSplit(Partition):
    """`ROOT/<split>/` (a folder or an archive): one partition per class folder or archive
    below it, and one for anything else. A gzip-compressed split is one partition: it can only
    be read in one pass."""
    split: str
    place: folders.Place
    sizes_known = True

    def split_further(self) -> list[Partition]:
        if self.place.archive is not None and self.place.archive.streamed:
            return [StreamedSplit(self.split, self.place)]
        places, files = folders.children(self.place)
        packed = _packed_split(self.split, self.place, places)
        if packed is not None:
            LOG.info('%s holds %s/, the split folder packed in it; reading the classes in it',
                     self.place.path, fileio.basename(packed.path))
            inner_places, inner_files = folders.children(packed)
            places = [p for p in places if p.path != packed.path] + inner_places
            files = files + inner_files
        classes = [p for p in places if not p.name.startswith('.')
                   and not (p.archive is not None and p.name == '__MACOSX')]
        others = tuple(p for p in places if p not in classes)
        return (_class_partitions(self.split, self.place, classes)
                + ([SplitFolderFiles(self.split, self.place, tuple(files), others)]
                   if files or others else []))


def _class_partitions(split: str, place: folders.Place,
                      classes: list[folders.Place]) -> list[Partition]:
    """A ClassFolder each, up to MAX_CLASS_PARTITIONS of them; past it the real folders among
    them go by name, many to a ClassFolders, so that there are no more partitions than that."""
    if len(classes) <= MAX_CLASS_PARTITIONS:
        return [ClassFolder(split, p) for p in classes]
    real = [p.name for p in classes if p.archive is None]
    per = -(-len(real) // MAX_CLASS_PARTITIONS)
    return ([ClassFolder(split, p) for p in classes if p.archive is not None]
            + [ClassFolders(split, place, tuple(real[at:at + per]))
               for at in range(0, len(real), per)])


def _packs_split(split: str, name: str) -> bool:
    """Whether a folder directly in a split's archive is the split folder packed in it
    (`tar cf val.tar val`): named for that split, it is not a class."""
    return split_of(name) == split


def _packed_split(split: str, place: folders.Place,
                  places: list[folders.Place]) -> folders.Place | None:
    """The folder directly in a split archive that is the split folder packed in it, standing
    for the archive (its key the archive's, as when it is read in one pass); None if none."""
    if place.archive is None or place.prefix:
        return None
    packed = [p for p in places if _packs_split(split, p.name)]
    return dataclasses.replace(packed[0], key=place.key) if packed else None


@dataclasses.dataclass(frozen=True)
class SplitFolderFiles(Partition):
    """What lies directly in `ROOT/<split>/` besides class folders: files there have no class
    (each is reported); hidden files and folders, and in archives directory entries and
    `__MACOSX/`, are ignored (and counted)."""
    split: str
    place: folders.Place
    files: tuple[folders.File, ...]
    hidden_folders: tuple[folders.Place, ...] = ()

    def examples(self) -> Iterator[ExampleRef]:
        for folder in self.hidden_folders:  # Everything below it is ignored (__MACOSX too).
            for _, inner in folders.walk(folder):
                yield _file_ref(self.split, inner, None, hidden=True)
        for file in self.files:
            yield _unclassified(self.split, self.place, file.name, file)


def _unclassified(split: str, place: folders.Place, relative: str,
                  file: folders.File) -> ExampleRef:
    file, _ = _utf8_named(file, None)
    if (_is_hidden(relative) or _ignored_in_archive(relative, file)) and not _ends_archive(file):
        return _file_ref(split, file, None, hidden=True)
    return ExampleRef(split, file.key, file.path if file.member else '', file.name, None,
                      problem=file.error or _unclassified_problem(split, place, file),
                      member=file.member)


def _unclassified_problem(split: str, place: folders.Place, file: folders.File) -> str:
    """Why a file directly in a split folder has no class, and what to do: move it into a class
    folder, or (a file inside an archive, which cannot be moved) label it with a CSV."""
    if file.member is None:
        return f'not in a class folder: move it to {place.path}/<class>/{file.name}'
    return (f'not in a class folder, inside an archive: label the images of {place.path} with a '
            f'CSV of uri,label naming each by its path through the archive, given as '
            f'--csv_{split} (pipeline.tools.imagenet_labels writes ImageNet\'s from the devkit '
            "or Kaggle's LOC_val_solution.csv)")


@dataclasses.dataclass(frozen=True)
class ClassFolder(Partition):
    """`ROOT/<split>/<class>/` (a folder or an archive): every file below it has that label;
    hidden files and folders are ignored (and counted)."""
    split: str
    place: folders.Place
    listed_together = True

    def examples(self) -> Iterator[ExampleRef]:
        label = self.place.name
        for relative, file in folders.walk(self.place):
            yield _walked_ref(self.split, relative, file, label)


@dataclasses.dataclass(frozen=True)
class ClassFolders(Partition):
    """Real class folders of the split folder `place`, by name, listed one after another: each
    partition crosses the runner as an element, and a million class folders (empty ones, say)
    a partition each took the launcher to 828 MB."""
    split: str
    place: folders.Place
    names: tuple[str, ...]
    listed_together = True

    def examples(self) -> Iterator[ExampleRef]:
        for name in self.names:
            inner = folders.Place(fileio.join(self.place.path, name), f'{self.place.key}/{name}')
            yield from ClassFolder(self.split, inner).examples()


@dataclasses.dataclass(frozen=True)
class StreamedSplit(Partition):
    """A gzip-compressed split, read in one pass: the first folder of each member's path is
    its class (below a folder named for the split, when the archive packs the split in one)."""
    split: str
    place: folders.Place

    def examples(self) -> Iterator[ExampleRef]:
        for relative, file in folders.walk(self.place):
            first, _, inside = relative.partition('/')
            if inside and _packs_split(self.split, first):
                relative = inside
                file = dataclasses.replace(file, key=f'{self.place.key}/{inside}')
            label, _, rest = relative.partition('/')
            if rest and label and not _is_hidden(label) and label != '__MACOSX':
                yield _walked_ref(self.split, rest, file, label)
            else:
                yield _unclassified(self.split, self.place, relative, file)


def _folder_source(root: str, labels: LabelSettings, optional: bool = False,
                   accept_cut: bool = False, by_csv: tuple[str, ...] = ()) -> Source:
    """The splits of the folder layout at `root`; those in `by_csv` (given by --csv_<split>:
    Kaggle's flat val/, labelled by a CSV through the zip) are left to the CSVs."""
    place = folders.place_of(root)
    if place.archive is None:
        _check_not_saved_by_datasets(root)
    places = _folders_above_splits(place, root, accept_cut)
    inner = _only_folder(place, places)
    if inner is not None:
        inner_places = _folders_above_splits(inner, root, accept_cut)
        if any(_split_folder(p) for p in inner_places):
            LOG.info('%s holds one folder, %s/; reading the splits in it', root,
                     fileio.basename(inner.path))
            places = inner_places
    for p in places:
        if _split_folder(p) in by_csv:
            LOG.warning('%s: not converted: %s/, split %s, is given by --csv_%s', root, p.name,
                        _split_folder(p), _split_folder(p))
    places = [p for p in places if _split_folder(p) not in by_csv]
    found = [p for p in places if _split_folder(p)]
    for split in SPLITS:
        twins = [p.path for p in found if _split_folder(p) == split]
        if len(twins) > 1:
            raise DatasetError(f'{" and ".join(twins)} both stand for split {split}; keep one')
    splits = tuple(s for s in SPLITS if s in {_split_folder(p) for p in found})
    if not splits and not optional:
        raise DatasetError(f'{root} has no split folders; expected {root}/train/<class>/<image> '
                           '(and/or validation/ or val/, test/; each may be a .tar, .tar.gz or '
                           '.zip)')
    left_out = sorted(p.name for p in places if not _split_folder(p) and not p.name.startswith('.')
                      and p.name != '__MACOSX')
    if left_out and (splits or by_csv):
        named = [f'{n}/' if n.isprintable() else repr(n) for n in left_out[:5]]
        more = f' and {len(left_out) - 5} more' if len(left_out) > 5 else ''
        advice = ('its images are converted where a --csv_<split> names them' if optional
                  else 'rename a folder to convert it')
        LOG.warning('%s: left out %s%s: not a split folder (train, validation or val, test); %s',
                    root, ', '.join(named), more, advice)
    by_name = {_split_folder(p): p for p in found}
    return Source([FolderSplit(s, by_name[s]) for s in splits], splits, labels,
                  identity=f'folder {root}')


def _check_not_saved_by_datasets(root: str) -> None:
    """DatasetError if `root` is a dataset Hugging Face `datasets` saved with save_to_disk
    (Arrow files, dataset_dict.json, or state.json per split): no folder layout, but one
    `to_parquet` away from the parquet files --input_dir reads."""
    if fileio.exists(f'{root}/dataset_dict.json'):   # Splits: a DatasetDict.
        write = ("[d.to_parquet(f'OUT/data/{s}-00000-of-00001.parquet') for s, d in "
                 f"datasets.load_from_disk('{root}').items()]")
    elif fileio.exists(f'{root}/state.json'):       # One Dataset.
        write = (f"datasets.load_from_disk('{root}').to_parquet("
                 "'OUT/data/train-00000-of-00001.parquet')")
    else:
        return
    raise DatasetError(f'{root} looks like a Hugging Face dataset saved with save_to_disk (Arrow '
                       'files), which is not read; write it as parquet files and give their '
                       f'folder: python -c "import datasets; {write}" then --input_dir=OUT')


def _folders_above_splits(place: folders.Place, root: str,
                          accept_cut: bool) -> list[folders.Place]:
    """The folders in `place`, where the split folders are looked for. Damage of an archive
    there is an error (unless `accept_cut`): no split can count what it hides."""
    places, files = folders.children(place)
    limit = [f.error for f in files if folders.over_limit(f)]
    if limit:
        raise DatasetError(f'{root}: {limit[0]}')
    damage = [f for f in files if f.member is not None and f.member.unnamed]
    if damage and zip_index.over_limit(damage[0].error):
        raise DatasetError(f'{root}: {damage[0].error}')
    if damage and not accept_cut:
        raise DatasetError(f'{root} is damaged above its split folders ({damage[0].error}): a '
                           'split or some of its images may be missing and how many cannot be '
                           'known. Fetch the archive again, or pass --max_error_ratio=1 to '
                           'convert what it holds')
    if place.prefix and not (places or files):
        raise DatasetError(f'{place.archive.path} holds no folder {place.prefix}: give '
                           '--input_dir a folder it holds (tar tf or unzip -l lists them)')
    return places


def _split_folder(place: folders.Place) -> str | None:
    """The split a folder of the root holds (`val/` and `valid/` hold validation), or None."""
    return split_of(place.name)


def _only_folder(place: folders.Place, places: list[folders.Place]) -> folders.Place | None:
    """The one folder an archive holds without split folders beside it (as `tar czf
    flowers.tar.gz flowers` packs one), hidden ones and `__MACOSX/` aside: the folder the
    archive stands for, so its key is the archive's. None for anything else."""
    if place.archive is None or place.prefix or any(_split_folder(p) for p in places):
        return None
    shown = [p for p in places if not p.name.startswith('.') and p.name != '__MACOSX']
    return dataclasses.replace(shown[0], key=place.key) if len(shown) == 1 else None


class FolderKind(InputKind):
    """`--input_dir`: a folder (local or gs://, its splits and classes folders or archives)."""

    usage = '--input_dir (with --csv_<split> for splits it does not hold)'
    given_as = '--input_dir'
    combines = True

    def add_flags(self, flag: Callable[..., None]) -> None:
        flag('input_dir', help='Folder layout: INPUT_DIR/<split>/<class>/<image>, local or gs://. '
             'Splits are train, validation and test, whichever exist. A folder of Hugging Face '
             'parquet files (INPUT_DIR/data/<split>-*.parquet, INPUT_DIR/<config>/<split>/*.parquet) '
             'is read as those.')

    def given(self, opts, config) -> bool:
        """Whether --input_dir is given and holds no parquet files (parquet_files.py's)."""
        return bool(opts.input_dir) and parquet_files.find_layout(opts.input_dir.rstrip('/')) is None

    def paths(self, opts) -> list[str]:
        return [opts.input_dir]

    def root(self, opts) -> str | None:
        return opts.input_dir

    def source(self, opts, labels: LabelSettings, config, alone: bool) -> Source:
        by_csv = tuple(s for s in SPLITS if getattr(opts, f'csv_{s}', None))
        return _folder_source(real_location(opts.input_dir), labels, not alone,
                              accept_cut=opts.max_error_ratio >= 1, by_csv=by_csv)


FOLDER = FolderKind()
