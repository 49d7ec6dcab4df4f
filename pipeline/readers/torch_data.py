"""A PyTorch `IterableDataset` over the shards of a split, without TensorFlow.

    from pipeline.readers.torch_data import TFRecordImageDataset
    loader = torch.utils.data.DataLoader(TFRecordImageDataset(out, 'train'), num_workers=4)

Records are read with this project's own TFRecord reader and Example decoder
(pipeline/output/records.py): no TensorFlow in a PyTorch environment, every record CRC-checked, and
`gs://` read through the same I/O layer as the converter. A dataset in ArrayRecord only is read
through ArrayRecord's reader, in the same order. Each DataLoader worker (and each rank,
with `rank`/`world_size`) reads its own shards; with fewer shards than readers, every reader
scans all shards and keeps every n-th record. Either way each record is read exactly once.
"""
import io

import numpy as np
import torch
from PIL import Image

from pipeline.output import metadata, records, shard_formats


class TFRecordImageDataset(torch.utils.data.IterableDataset):
    """Yields (uint8 tensor HxWx3, int label), or `transform(PIL image), label`."""

    def __init__(self, output_dir: str, split: str, transform=None, rank: int = 0, world_size: int = 1):
        super().__init__()
        info = metadata.load_json(output_dir, metadata.DATASET_INFO)
        self.shard_format = shard_formats.declared(info)[0]
        self.files = metadata.shard_paths(output_dir, info, split)
        self.transform, self.rank, self.world_size = transform, rank, world_size

    def _reader(self) -> tuple[int, int]:
        worker = torch.utils.data.get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        return self.rank * workers + worker_id, self.world_size * workers

    def __iter__(self):
        reader, readers = self._reader()
        if len(self.files) >= readers:
            files, stride = self.files[reader::readers], 1
        else:
            files, stride = self.files, readers
        position = 0
        for path in files:
            for data in self.shard_format.read_records(path):
                if stride == 1 or position % stride == reader:
                    yield self._item(data)
                position += 1

    def _item(self, data: bytes):
        example = records.decode_example(data)
        image = Image.open(io.BytesIO(example[records.ENCODED][0])).convert('RGB')
        label = example[records.LABEL][0]
        if self.transform is not None:
            return self.transform(image), label
        return torch.from_numpy(np.asarray(image).copy()), label
