"""Multi30k task 1 (Elliott et al. 2016): where the files are, their checksums, a download.

seqlab ships the de and en sides of train / val / test_2016_flickr in ``data/multi30k/``
(see its README for source, citation and terms: non-commercial research and education).
:func:`locate_multi30k` finds a folder holding the files, :func:`verify` checks a file's
sha256 against :data:`FILES`, :func:`download` fetches files from the public repository
(``multi30k/dataset`` at :data:`COMMIT`) and keeps only those whose sha256 matches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from urllib.request import urlopen

from seqlab.errors import DataError

__all__ = [
    "COMMIT",
    "FILES",
    "LANGS",
    "SHIPPED_DIR",
    "SPLITS",
    "download",
    "file_name",
    "locate_multi30k",
    "sha256_file",
    "url",
    "verify",
]

log = logging.getLogger("seqlab.data")

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
BASE_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1/raw/"
SPLITS = ("train", "val", "test_2016_flickr")
LANGS = ("de", "en", "fr", "cs")
SHIPPED_LANGS = ("de", "en")
SHIPPED_DIR = Path(__file__).resolve().parent.parent.parent / "data" / "multi30k"

# file name -> sha256 of the .gz file as stored in the repository (shared/data/README.md §1).
FILES: dict[str, str] = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}

_TIMEOUT_S = 60


def file_name(split: str, lang: str) -> str:
    """``"train", "de"`` → ``"train.de.gz"`` (checked against :data:`FILES`)."""
    name = f"{split}.{lang}.gz"
    if name not in FILES:
        raise DataError(
            f"Multi30k task 1 has no file {name}",
            hint=f"splits: {', '.join(SPLITS)}; languages: {', '.join(LANGS)}",
        )
    return name


def url(name: str) -> str:
    """Public download URL of a file of :data:`FILES`."""
    if name not in FILES:
        raise DataError(f"unknown Multi30k file {name!r}", hint=f"one of: {', '.join(FILES)}")
    return BASE_URL + name


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | Path) -> Path:
    """Check that a Multi30k file (named as in :data:`FILES`) has its published sha256."""
    p = Path(path)
    expected = FILES.get(p.name)
    if expected is None:
        raise DataError(
            "not a Multi30k task 1 file name", path=p, hint=f"expected one of: {', '.join(FILES)}"
        )
    if not p.is_file():
        raise DataError("file not found", path=p, hint="download it with seqlab.data.multi30k")
    found = sha256_file(p)
    if found != expected:
        raise DataError(
            f"sha256 mismatch: found {found}, expected {expected}",
            path=p,
            hint="the file is damaged or a different version: delete it and download it again "
            "(seqlab.data.multi30k.download), or use the copy shipped in data/multi30k",
        )
    return p


def _names(langs: Iterable[str], splits: Iterable[str] = SPLITS) -> list[str]:
    return [file_name(s, lang) for s in splits for lang in langs]


def _candidates(data_dir: Path) -> list[Path]:
    """Folders under an explicit data_dir that may hold the files, most specific first."""
    return [
        data_dir / "multi30k" / "task1" / "raw",
        data_dir / "task1" / "raw",
        data_dir / "multi30k",
        data_dir,
    ]


def locate_multi30k(
    data_dir: str | Path | None = None, langs: Iterable[str] = SHIPPED_LANGS
) -> Path:
    """The folder holding ``<split>.<lang>.gz`` for every split and the given languages.

    Order: an explicit ``data_dir`` (the shared data root with ``multi30k/task1/raw/``, or
    a folder holding the files directly), then the copy shipped in ``data/multi30k``.
    Every file of the folder returned has been checked against :data:`FILES`.
    """
    names = _names(tuple(langs))
    searched: list[Path] = []
    if data_dir is not None:
        searched += _candidates(Path(data_dir).expanduser())
    searched.append(SHIPPED_DIR)
    for folder in searched:
        if all((folder / n).is_file() for n in names):
            for n in names:
                verify(folder / n)
            if data_dir is not None and folder == SHIPPED_DIR:
                log.warning("no Multi30k files under %s; using the shipped copy", data_dir)
            return folder
    raise DataError(
        f"Multi30k files {', '.join(names)} not found (looked in "
        + ", ".join(str(p) for p in searched)
        + ")",
        hint='download them with `python -c "from seqlab.data.multi30k import download; '
        "download('data/multi30k')\"` or pass data_dir= the folder that holds them",
    )


def download(
    dest: str | Path,
    langs: Iterable[str] = SHIPPED_LANGS,
    splits: Iterable[str] = SPLITS,
    overwrite: bool = False,
) -> Path:
    """Download Multi30k task 1 files into ``dest`` and verify their sha256.

    Each file is written to a temporary file in ``dest``, checked, then renamed into
    place; a file whose checksum does not match is deleted and raises DataError, so a
    damaged download is never left under its real name. Files already present with the
    right checksum are kept unless ``overwrite``.
    """
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    for name in _names(tuple(langs), tuple(splits)):
        target = dest / name
        if target.is_file() and not overwrite and sha256_file(target) == FILES[name]:
            continue
        source = url(name)
        log.info("downloading %s", source)
        fd, tmp = tempfile.mkstemp(dir=dest, prefix=f".{name}.", suffix=".part")
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as f, urlopen(source, timeout=_TIMEOUT_S) as response:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    h.update(chunk)
                    f.write(chunk)
            if h.hexdigest() != FILES[name]:
                raise DataError(
                    f"downloaded file has sha256 {h.hexdigest()}, expected {FILES[name]}",
                    path=source,
                    hint="the download was damaged or the remote file changed; try again, "
                    "or use the copy shipped in data/multi30k",
                )
            os.replace(tmp, target)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise DataError(
                f"download failed: {e}",
                path=source,
                hint="check the network, or use the copy shipped in data/multi30k",
            ) from e
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return dest
