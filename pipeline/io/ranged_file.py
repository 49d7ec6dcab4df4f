"""RangedFile: a read-only file object over a local file or a Cloud Storage object whose every
read is one ranged read (fileio.read_range) of the bytes asked for. For readers that seek and
read what they need, pyarrow's parquet reader: a Cloud Storage stream would fetch 16 MB from
each position it is moved to."""
import io

from pipeline.io import fileio


class RangedFile(io.RawIOBase):
    def __init__(self, path: str, size: int):
        super().__init__()
        self.path, self._size, self._position = path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def size(self) -> int:
        return self._size

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._position + size)
        data = fileio.read_range(self.path, self._position, end - self._position)
        self._position += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
